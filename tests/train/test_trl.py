"""envlab environments in TRL's GRPOTrainer (trl 1.16.0): the environment_factory adapter, the
task dataset, the rollout_func over the engine; one real GRPO step through each, on a tiny
randomly initialised model built here."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from envlab.core import Component, EnvSpec, Limits, Rubric, Task, TaskSet, ToolEnv, tool
from envlab.envs.answers import format_number
from envlab.envs.calc import CalcEnv

trl = pytest.importorskip("trl")

from envlab.train.trl import (  # noqa: E402
    TASK_KEY,
    EnvlabRollout,
    environment_class,
    final_answer,
    task_dataset,
)


def _calc(n: int = 4) -> tuple[CalcEnv, list[Task]]:
    spec = CalcEnv(max_ops=2)
    return spec, list(spec.tasks(n=n))


def _row(ds: Any, i: int) -> dict[str, Any]:
    return dict(ds[i])


def _solve(env: Any, task: Task) -> None:
    """Play the oracle's tool calls through the adapter's tool methods (as TRL calls them)."""
    for op, a, b in task.metadata["steps"]:
        assert getattr(env, op)(a=a, b=b) != ""


def test_tools_are_the_envlab_schemas() -> None:
    from transformers.utils import get_json_schema

    spec, tasks = _calc()
    env = environment_class(spec, tasks)()
    for name, ts in spec.environment._tool_specs.items():
        got = get_json_schema(getattr(env, name))["function"]
        assert {k: got[k] for k in ("name", "description", "parameters")} == ts.openai["function"]


def test_tau_tools_render_for_trl() -> None:
    from transformers.utils import get_json_schema

    from envlab.envs.tau.spec import TauRetail

    spec = TauRetail()
    cls = environment_class(spec, list(spec.tasks(n=1)))
    env = cls()
    for name, ts in spec.environment._tool_specs.items():
        got = get_json_schema(getattr(env, name))["function"]
        assert got["name"] == name
        assert set(got["parameters"]["properties"]) == set(ts.parameters.get("properties", {}))
        assert set(got["parameters"].get("required", [])) == set(ts.parameters.get("required", []))


def test_dataset_rows_reset_and_grade() -> None:
    spec, tasks = _calc()
    ds = task_dataset(spec, tasks)
    assert ds.column_names == ["prompt", "task_id"]
    row = _row(ds, 0)
    assert row["prompt"][-1]["role"] == "user" and row["prompt"][-1][TASK_KEY] == tasks[0].id
    env = environment_class(spec, tasks)()
    assert env.reset(**row) is None  # the row's prompt is the episode's first observation
    _solve(env, tasks[0])
    final_answer([[{"role": "assistant", "content": format_number(tasks[0].answer)}]], [env])
    assert env.get_reward() == pytest.approx(1.0)
    # a fresh episode per reset: the same instance, a wrong answer, no tools
    assert env.reset(**_row(ds, 1)) is None
    final_answer([[{"role": "assistant", "content": "12345"}]], [env])
    assert env.get_reward() == pytest.approx(0.0)


def test_get_reward_refuses_without_final_answer() -> None:
    spec, tasks = _calc()
    env = environment_class(spec, tasks)()
    env.reset(**_row(task_dataset(spec, tasks), 0))
    with pytest.raises(Exception, match="final_answer"):
        env.get_reward()


def test_bad_tool_call_is_the_agents_and_step_limit_truncates() -> None:
    spec, tasks = _calc()
    spec = CalcEnv(max_ops=2)
    env = environment_class(spec, tasks)()
    env.reset(**_row(task_dataset(spec, tasks), 0))
    assert env.div(a=1, b=0).startswith("Error")  # readable by the model, not an env error
    for _ in range(20):  # past max_steps=12: the episode is truncated, further calls refused
        out = env.add(a=1, b=1)
    assert "ended" in out
    final_answer([[{"role": "assistant", "content": "2"}]], [env])
    assert env.get_reward() == pytest.approx(0.0)  # scored (truncated), not excluded


class BrokenEpisode(ToolEnv):
    rubric: ClassVar[Rubric] = Rubric([Component("one", lambda ctx: 1.0)])

    @tool
    def lookup(self, key: str) -> str:
        """Look a key up.

        Args:
            key: The key.
        """
        raise RuntimeError("the environment's database is gone")


class BrokenEnv(EnvSpec):
    id = "broken-lookup"
    environment = BrokenEpisode
    default_limits = Limits(max_steps=4)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet([Task(id="b-0", prompt="look up k", answer="")], seed=seed, name=self.id)


def test_env_error_is_unscored_none() -> None:
    spec = BrokenEnv()
    tasks = list(spec.tasks())
    env = environment_class(spec, tasks)()
    env.reset(**_row(task_dataset(spec, tasks), 0))
    assert "environment failed" in env.lookup(key="k")
    final_answer([[{"role": "assistant", "content": "x"}]], [env])
    assert env.get_reward() is None  # TRL turns None into NaN: out of the baseline, advantage 0


def _config(tmp_path: Any, **kw: Any) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=12,
        max_steps=1,
        learning_rate=1e-3,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        use_cpu=True,
        seed=0,
        **kw,
    )


def planted_variance(completions: list[Any], **_: Any) -> list[float]:
    """A second reward column that differs within every group, so that the step has a
    non-zero advantage and must move the weights (the random model's envlab reward is 0)."""
    return [float(i % 2) for i in range(len(completions))]


def _changed(before: dict[str, Any], model: Any) -> bool:
    import torch

    return any(not torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_grpo_step_through_environment_factory(tiny: tuple[Any, Any], tmp_path: Any) -> None:
    from trl import GRPOTrainer

    model, tok = tiny
    spec, tasks = _calc(2)
    cls = environment_class(spec, tasks)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[final_answer, planted_variance],
        args=_config(tmp_path, max_tool_calling_iterations=2),
        train_dataset=task_dataset(spec, tasks),
        processing_class=tok,
        environment_factory=cls,
    )
    assert trainer.reward_func_names == ["final_answer", "planted_variance", cls.__name__]
    trainer.train()
    assert trainer.state.global_step == 1
    logged = trainer.state.log_history[0]
    assert logged[f"rewards/{cls.__name__}/mean"] == pytest.approx(0.0)  # random model: wrong
    assert all(e._answered for e in trainer.environments)
    assert _changed(before, model)


def test_grpo_step_through_rollout_func(tiny: tuple[Any, Any], tmp_path: Any) -> None:
    from trl import GRPOTrainer

    model, tok = tiny
    spec, tasks = _calc(2)
    rollout = EnvlabRollout(spec, tasks, max_turns=2, concurrency=2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[rollout.reward, planted_variance],
        args=_config(tmp_path),
        train_dataset=task_dataset(spec, tasks),
        processing_class=tok,
        rollout_func=rollout,
    )
    trainer.train()
    assert trainer.state.global_step == 1
    trajs = rollout.last
    assert len(trajs) == 2 and len({t.group_id for t in trajs}) == 1  # one group of 2 samples
    assert [t.sample_index for t in trajs] == [0, 1]
    for t in trajs:
        assert t.scored and t.tokens is not None
        tv = t.tokens
        assert len(tv.completion_ids) == len(tv.loss_mask) == len(tv.logprobs)
        assert all(lp <= 0.0 for lp, m in zip(tv.logprobs, tv.loss_mask, strict=True) if m)
        # turn 0's prompt is the chat template's rendering of the transcript's first messages
        first = [m for m in t.messages[:2]]
        rendered = tok.apply_chat_template(first, tokenize=False, add_generation_prompt=True)
        assert tv.turn_prompt(0) == tok(rendered, add_special_tokens=False)["input_ids"]
        assert t.info["policy_version"] == 0
    assert trainer.state.log_history[0]["rewards/envlab_reward/mean"] == pytest.approx(0.0)
    assert _changed(before, model)
