"""``EnvlabRollout``: TRL's ``rollout_func`` (trl 1.16.0) over envlab's rollout engine.

Each row TRL hands over (its prompts come repeated ``num_generations`` times, consecutively) is
one envlab episode of the task the prompt names, run by ``run_episodes`` (the spec's limits,
timeouts, retries, grading) with the trainer's current model as the agent
(``envlab.train.policy.PolicyAgents``: the tool-calling harness in text mode). The output is
each trajectory's token view, exactly as the policy produced it: ``prompt_ids``,
``completion_ids``, ``logprobs`` and ``env_mask`` (= ``loss_mask``: 1 on the model's tokens, 0
on tool responses and the chat template's turn tokens), plus ``envlab_reward`` (the valid grade,
``None`` when unscored) and ``envlab_status``, which TRL forwards to the reward functions: pass
``rollout.reward``.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from envlab.core import ConfigError, EnvSpec, Task, Trajectory
from envlab.train.tasks import TASK_KEY, task_index


def _samples(prompts: list[Any], n: int) -> list[int]:
    """Sample index of each row in its group: TRL's sampler repeats each prompt
    ``num_generations`` times in a row (``RepeatSampler(mini_repeat_count=...)``)."""
    if len(prompts) % n:
        raise ConfigError(f"{len(prompts)} rows do not make groups of num_generations={n}")
    for start in range(0, len(prompts), n):
        if any(p != prompts[start] for p in prompts[start : start + n]):
            raise ConfigError("a group's rows have different prompts: is this TRL's sampler?")
    return [i % n for i in range(len(prompts))]


class EnvlabRollout:
    """``GRPOTrainer(rollout_func=EnvlabRollout(spec, tasks), reward_funcs=[rollout.reward])``."""

    def __init__(
        self,
        spec: EnvSpec,
        tasks: Sequence[Task],
        *,
        seed: int = 0,
        temperature: float | None = None,
        max_turns: int = 8,
        max_tokens_per_turn: int | None = None,
        concurrency: int = 4,
        config: Any = None,
        on_trajectories: Callable[[list[Trajectory]], None] | None = None,
    ) -> None:
        self.spec, self.tasks, self.seed = spec, task_index(tasks), seed
        self.temperature, self.max_turns = temperature, max_turns
        self.max_tokens_per_turn, self.concurrency, self.config = (
            max_tokens_per_turn,
            concurrency,
            config,
        )
        self.on_trajectories = on_trajectories
        self.calls = 0
        self.last: list[Trajectory] = []

    def _task_of(self, prompt: Any) -> Task:
        ids = [m.get(TASK_KEY) for m in prompt if isinstance(m, dict) and m.get(TASK_KEY)]
        if not ids or ids[-1] not in self.tasks:
            raise ConfigError(
                "a prompt names no known task: build the dataset with "
                "envlab.train.trl.task_dataset(spec, tasks) and pass the same tasks here"
            )
        return self.tasks[ids[-1]]

    def agents(self, trainer: Any) -> Any:
        from envlab.train.policy import PolicyAgents

        step = int(trainer.state.global_step)
        budget = int(trainer.max_completion_length)
        return PolicyAgents(
            trainer.model,
            trainer.processing_class,
            model_id=f"{type(trainer.model).__name__}@step{step}",
            temperature=self.temperature if self.temperature is not None else trainer.temperature,
            max_tokens=self.max_tokens_per_turn or budget,
            max_turns=self.max_turns,
            max_episode_tokens=budget,
        )

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from envlab.rollout import PlannedEpisode, episode_ids_in_group, run_episodes

        agents = self.agents(trainer)
        env_hash = self.spec.content_hash()
        training = bool(trainer.model.training)
        samples = _samples(
            prompts, trainer.num_generations if training else trainer.num_generations_eval
        )
        step = int(trainer.state.global_step)
        plan = []
        for i, (prompt, sample) in enumerate(zip(prompts, samples, strict=True)):
            task = self._task_of(prompt)
            key = (
                f"{self.spec.name}\0{env_hash}\0{task.id}\0{self.seed}\0{self.calls}\0{i - sample}"
            )
            group = hashlib.sha256(key.encode()).hexdigest()[:16]
            info = {"trainer_step": step, "policy_version": step, "training": training}
            plan.append(
                PlannedEpisode(task, sample, episode_ids_in_group(group, sample), agents, info=info)
            )
        self.calls += 1
        trajs = asyncio.run(
            run_episodes(self.spec, plan, config=self.config, concurrency=self.concurrency)
        )
        self.last = trajs
        if self.on_trajectories is not None:
            self.on_trajectories(trajs)
        return _token_fields(trajs, trainer.processing_class)

    @property
    def reward(self) -> Callable[..., list[float | None]]:
        def envlab_reward(
            completions: list[Any], envlab_reward: list[Any], **_: Any
        ) -> list[float | None]:
            """The episodes' valid grades; None for unscored ones (env or infra error)."""
            return list(envlab_reward)

        return envlab_reward


def _token_fields(trajs: list[Trajectory], tokenizer: Any) -> dict[str, list[Any]]:
    """TRL's rollout output: the token view of each trajectory, its reward and status.

    An unscored episode (env or infra error) has reward ``None`` (TRL leaves it out of the
    baseline, advantage 0) and its mask zeroed; an episode without a token view (no model turn
    finished) gets one masked end-of-turn token, and its reward if it was scored."""
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "prompt_ids",
            "completion_ids",
            "logprobs",
            "env_mask",
            "envlab_reward",
            "envlab_status",
        )
    }
    eos = tokenizer.eos_token_id
    for t in trajs:
        tv, scored = t.tokens, t.scored
        if tv is not None and tv.completion_ids:
            prompt, completion = list(tv.prompt_ids), list(tv.completion_ids)
            logprobs = list(tv.logprobs) or [0.0] * len(completion)
            mask = list(tv.loss_mask) if scored else [0] * len(completion)
        else:  # scored still counts in its group's baseline; nothing to train on
            prompt = list(tv.prompt_ids) if tv is not None and tv.prompt_ids else [eos]
            completion, logprobs, mask = [eos], [0.0], [0]
        out["prompt_ids"].append(prompt)
        out["completion_ids"].append(completion)
        out["logprobs"].append(logprobs)
        out["env_mask"].append(mask)
        out["envlab_reward"].append(float(t.reward) if scored and t.reward is not None else None)
        out["envlab_status"].append(str(t.status))
    return out
