"""LMLearner on real episodes that end badly, and the batched sampler: an episode cut in the
middle of its generation (its step's time limit) is counted and the run goes on; a group's
samples share one batch, each with the logprobs of what it drew; the untrained snapshot acts
with the starting weights; ``train_layers`` trains only the top blocks."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from envlab.core import Limits, Task  # noqa: E402
from envlab.rollout.driver import PlannedEpisode, episode_ids_in_group, run_episodes  # noqa: E402
from envlab.train.lm_learner import LMLearner  # noqa: E402
from envlab.train.loop import TrainConfig, train  # noqa: E402
from tests.train.conftest import tiny_model, tiny_tokenizer  # noqa: E402
from tests.train.test_lm_learner import AsciiEnv  # noqa: E402

AGENT = {"max_tokens": 10, "max_turns": 1, "instructions": ""}


FORWARD_S = 0.03
"""Each forward pass of the model takes at least this long (a hook sleeps)."""


class CutEnv(AsciiEnv):
    """AsciiEnv whose task ``say-1`` allows its step less than one forward pass: every episode
    of it is cut while the model generates (a timeout, the agent's failure: graded 0, and no
    token view when no reply came back)."""

    id = "ascii-cut"

    def limits(self, task: Task) -> Limits:
        base = super().limits(task)
        cut = {"step_timeout_s": FORWARD_S / 3}
        return base.model_copy(update=cut) if task.id == "say-1" else base


def _slow(model: Any) -> Any:
    model.register_forward_pre_hook(lambda module, args: time.sleep(FORWARD_S))
    return model


def _learner(**kw: Any) -> LMLearner:
    tok = tiny_tokenizer()
    agent = {**AGENT, **kw.pop("agent", {})}
    return LMLearner(tiny_model(len(tok)), tok, lr=3e-3, agent_kwargs=agent, **kw)


@pytest.mark.parametrize("batch", [False, True], ids=["one-at-a-time", "batched"])
def test_an_episode_cut_mid_generation_is_counted_and_the_run_goes_on(
    tmp_path: Path, batch: bool
) -> None:
    from envlab.runs import TrajectoryStore

    spec, learner = CutEnv(), _learner(agent={"batch": batch})
    _slow(learner.model)  # before the first snapshot: every copy sleeps too
    config = TrainConfig(steps=2, groups_per_step=2, group_size=3, sync=True, concurrency=3)
    result = asyncio.run(
        train(spec, spec.tasks(), learner, out_dir=tmp_path, config=config, command=["test"])
    )
    assert learner.version == 2 and [m.step for m in result.metrics] == [1, 2]
    trajs = TrajectoryStore(result.run_dir / "trajectories.jsonl").load()
    cut = [t for t in trajs if t.task_id == "say-1"]
    assert cut and all(t.status.value == "timeout" for t in cut)
    assert all(t.reward == 0.0 for t in cut)  # the agent's failure, graded, never excluded
    # cut before its reply came back: no token view (one cut after it keeps the reply's view)
    viewless = [t for t in cut if t.tokens is None and "learner_step" in t.info]
    assert sum(m.learner["no_token_view"] for m in result.metrics) == len(viewless) > 0
    assert all(m.learner["tokens"] > 0 for m in result.metrics)  # the other groups trained


def _play(agents: Any, tasks: list[Task], size: int) -> list[Any]:
    spec = AsciiEnv()
    plan = [
        PlannedEpisode(task, s, episode_ids_in_group(f"{0xBEE0 + i:016x}", s), agents)
        for i, task in enumerate(tasks)
        for s in range(size)
    ]
    return asyncio.run(run_episodes(spec, plan, concurrency=len(plan)))


def test_a_groups_samples_share_one_batch_with_their_own_logprobs() -> None:
    from envlab.train.learner import Group
    from envlab.train.lm_batch import checked as _checked
    from envlab.train.lm_batch import pack as _pack

    learner = _learner(agent={"batch": True})
    agents = learner.policy()
    tasks = list(AsciiEnv().tasks(n=2))
    trajs = _play(agents, tasks, 4)
    assert all(t.scored and t.tokens is not None for t in trajs)
    assert sorted(agents.sampler.batches) == [4, 4]  # one batch per prompt, each row its own
    assert len({tuple(t.tokens.completion_ids) for t in trajs}) > 4  # rows sample apart
    for t in trajs:  # the recorded logprobs are the model's, token by token
        packed = _pack([_checked(t, 0.0)], "cpu")
        with torch.no_grad():
            new = learner._logps(packed)[0]
        old = torch.tensor(t.tokens.logprobs)
        assert torch.allclose(new, old, atol=1e-4), (new - old).abs().max()
    m = learner.step([Group(0, trajs[0].group_id, trajs[0].task_id, 0, tuple(trajs[:4]))])
    assert abs(m["ratio_mean"] - 1.0) < 1e-4


def test_the_untrained_snapshot_acts_with_the_starting_weights() -> None:
    from envlab.train.learner import Group

    learner = _learner()
    start = {k: v.detach().clone() for k, v in learner.model.state_dict().items()}
    trajs = _play(learner.policy(), list(AsciiEnv().tasks(n=1)), 4)
    rewards = [1.0, 0.0, 0.0, 0.0]
    group = Group(
        0,
        trajs[0].group_id,
        trajs[0].task_id,
        0,
        tuple(dataclasses.replace(t, reward=r) for t, r in zip(trajs, rewards, strict=True)),
    )
    learner.step([group])
    learner.step([group])
    base = learner.baseline_policy()
    assert base.spec.model_id.endswith("@untrained") and base.version == 0
    assert all(torch.equal(start[k], v) for k, v in base.model.state_dict().items())
    assert any(not torch.equal(start[k], v) for k, v in learner.model.state_dict().items())
    again = _play(base, list(AsciiEnv().tasks(n=1)), 4)  # the same seeds as v0's samples
    assert [t.tokens.completion_ids for t in again] == [t.tokens.completion_ids for t in trajs]


def test_train_layers_trains_only_the_top_blocks() -> None:
    from envlab.core import ConfigError

    learner = _learner(train_layers=1)
    names = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert names and all(n.startswith(("model.layers.1.", "model.norm.")) for n in names)
    with pytest.raises(ConfigError, match=r"train_layers=3.*2 decoder layers"):
        _learner(train_layers=3)
