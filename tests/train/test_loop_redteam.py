"""Red team of ``envlab train``: agents that fail on purpose, a learner that lies, an
environment that breaks, tampered checkpoints and run files, held-out rows with excluded
episodes. A test that passes is an attack the code defends; ``xfail(strict=True)`` marks a hole
(the reason says where it is and how to close it)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    ConfigError,
    EpisodeContext,
    Limits,
    ModelUnavailable,
    Observation,
    Status,
    StoreError,
)
from envlab.rollout.config import EpisodeConfig
from envlab.runs import TrajectoryStore
from envlab.runs.metrics import read_metrics
from envlab.train.checkpoint import latest_checkpoint
from envlab.train.learner import POLICY_VERSION
from envlab.train.loop import TrainConfig, train
from tests.support.bandit import BanditEnv, TableLearner
from tests.support.redteam_train import (
    FailingBanditEnv,
    RogueAgent,
    RogueLearner,
    bandit_reward,
)

torch = pytest.importorskip("torch")

FAST = EpisodeConfig(overrides=Limits.overrides(step_timeout_s=0.2), max_retries=0)


def _train(
    out: Path,
    learner: Any,
    env: BanditEnv | None = None,
    *,
    resume: bool = False,
    episode_config: EpisodeConfig | None = FAST,
    **cfg: Any,
) -> Any:
    env = env or BanditEnv()
    config = TrainConfig(**{"steps": 4, "groups_per_step": 3, "group_size": 4, **cfg})
    return asyncio.run(
        train(env, env.tasks(), learner, out_dir=out, config=config, resume=resume,
              episode_config=episode_config, command=["redteam"])
    )  # fmt: skip


def _trajectories(run: Path) -> list[Any]:
    return TrajectoryStore(run / "trajectories.jsonl").load(every_record=True)


# --- the agent's own failures are learned from as 0, never dropped ------------------------------


@pytest.mark.parametrize(
    ("mode", "status"),
    [("raise", Status.AGENT_ERROR), ("malformed", Status.AGENT_ERROR), ("timeout", Status.TIMEOUT)],
)
def test_an_agents_own_failure_is_learned_from_as_zero(
    tmp_path: Path, mode: str, status: Status
) -> None:
    """Every sample of t0's groups fails by the agent's doing: they are graded as giving no
    answer (the bandit pays 0.2 for anything but the best arm) and learned from, never
    excluded, never dropped."""
    learner = RogueLearner(mode, bad=("t0",))
    result = _train(tmp_path, learner, sync=True)  # sync: t0's slow groups are waited for
    t0 = [t for t in _trajectories(tmp_path) if t.task_id == "t0"]
    assert t0, "the run must play t0"
    no_answer = bandit_reward("t0", "")
    assert all(t.status is status and t.scored and t.reward == no_answer for t in t0)
    assert all("excluded" not in t.info and "dropped" not in t.info for t in t0)
    learned = {e for s in learner.seen for task, st, r, e in s if task == "t0"}
    assert learned == {t.episode_id for t in t0}
    assert all(r == no_answer and st == status.value for s in learner.seen
               for task, st, r, _ in s if task == "t0")  # fmt: skip
    assert result.state.excluded_samples == 0 and result.state.dropped_groups == 0


def test_an_agent_raising_infra_error_cannot_dodge_its_grade(tmp_path: Path) -> None:
    learner = RogueLearner("infra", bad=("t0",))
    result = _train(tmp_path, learner, sync=True)
    t0 = [t for t in _trajectories(tmp_path) if t.task_id == "t0"]
    assert t0 and all(t.scored and t.reward == bandit_reward("t0", "") for t in t0)
    assert result.state.dropped_groups == 0
    assert {e for s in learner.seen for task, _, _, e in s if task == "t0"} == {
        t.episode_id for t in t0
    }


def test_env_errors_are_excluded_and_counted_never_learned_from(tmp_path: Path) -> None:
    env = FailingBanditEnv(env_error_every=3)
    learner = RogueLearner()
    result = _train(tmp_path, learner, env)
    trajs = _trajectories(tmp_path)
    broken = [t for t in trajs if t.status is Status.ENV_ERROR]
    assert broken and all(t.reward is None and t.info["excluded"] == "env_error" for t in broken)
    assert all(st in ("ok", "truncated") for s in learner.seen for _, st, _, _ in s)
    assert not {e for s in learner.seen for *_, e in s} & {t.episode_id for t in broken}
    assert result.state.excluded_samples == len(broken)
    assert result.metrics[-1].excluded_samples == len(broken)


# --- a learner that lies ----------------------------------------------------------------------


def test_a_learner_whose_policy_is_privileged_is_refused(tmp_path: Path) -> None:
    class Cheat(TableLearner):
        def policy(self) -> Any:
            return AgentClass(OracleAgent)

    with pytest.raises(ConfigError, match="privileged"):
        _train(tmp_path, Cheat())
    assert not (tmp_path / "checkpoints").exists()


def test_a_policy_cannot_turn_privileged_after_the_check(tmp_path: Path) -> None:
    RogueAgent.saw_task.clear()
    learner = RogueLearner(flip=True)
    with contextlib.suppress(ConfigError):  # refused: defended
        _train(tmp_path, learner, steps=2)
    assert RogueAgent.saw_task == []
    assert not any(t.agent.privileged for t in _trajectories(tmp_path))


def test_a_learner_cannot_rewrite_what_the_run_records(tmp_path: Path) -> None:
    learner = RogueLearner(mutate=True)
    result = _train(tmp_path, learner)
    learned = [t for t in _trajectories(tmp_path) if "learner_step" in t.info]
    assert learned
    for t in learned:  # the grade the environment gave, and the version that acted
        assert t.reward == bandit_reward(t.task_id, t.steps[-1].action.text)
        assert t.info[POLICY_VERSION] < t.info["learner_step"]
    assert result.metrics[0].reward_mean < 1.0


def test_a_learner_that_does_not_advance_its_version_stops_the_run(tmp_path: Path) -> None:
    class Stuck(TableLearner):
        def step(self, batch: Any) -> dict[str, float]:
            out = super().step(batch)
            self._version -= 1
            return out

    with pytest.raises(ConfigError, match="advance version by one"):
        _train(tmp_path, Stuck())


def test_a_learner_state_no_resume_can_read_is_refused_when_written(tmp_path: Path) -> None:
    with pytest.raises((ConfigError, StoreError)):
        _train(tmp_path, RogueLearner(unreadable=True), steps=2, checkpoint_every=1)


# --- tampered checkpoints and run files -------------------------------------------------------

RUN_FILES = ("trajectories.jsonl", "metrics.jsonl", "train.json", "run.json")


class _Payload:
    """Pickled into a checkpoint: opening it must never run this."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.marker,))


def _tamper(path: Path, kind: str, marker: Path) -> None:
    good = torch.load(path, weights_only=True)
    if kind == "garbage":
        path.write_bytes(b"\x80\x04not a checkpoint at all")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "pickled_object":
        torch.save({"learner": _Payload(str(marker)), "loop": good["loop"]}, path)
    elif kind == "plain_pickle":
        path.write_bytes(pickle.dumps({"learner": _Payload(str(marker)), "loop": good["loop"]}))
    elif kind == "wrong_version":
        good["learner"]["version"] = 99
        torch.save(good, path)
    elif kind == "bad_loop":
        good["loop"]["surprise"] = 1
        torch.save(good, path)
    elif kind == "no_loop":
        torch.save({"learner": good["learner"]}, path)
    elif kind == "negative_offset":
        good["loop"]["trajectories_bytes"] = -1
        torch.save(good, path)
    elif kind in ("smaller_offset", "smaller_metrics", "mid_line_offset", "old_smaller_offset"):
        # a smaller size that ends a line: a resume would have cut recorded episodes silently
        name, key = (("metrics.jsonl", "metrics_bytes") if kind == "smaller_metrics"
                     else ("trajectories.jsonl", "trajectories_bytes"))  # fmt: skip
        lines = (path.parent.parent / name).read_bytes()[: good["loop"][key]].splitlines(True)
        good["loop"][key] = sum(len(x) for x in lines[: len(lines) // 2])
        if kind == "mid_line_offset":
            good["loop"][key] += 3
        if kind == "old_smaller_offset":  # a checkpoint written before tails were recorded
            good["loop"]["trajectories_tail"] = good["loop"]["metrics_tail"] = ""
            good["loop"][key] += 3
        torch.save(good, path)
    elif kind == "bad_tail":
        good["loop"]["trajectories_tail"] = "not a digest"
        torch.save(good, path)


@pytest.mark.parametrize(
    "kind",
    [
        "garbage",
        "empty",
        "pickled_object",
        "plain_pickle",
        "truncated",
        "wrong_version",
        "bad_loop",
        "no_loop",
        "negative_offset",
        "smaller_offset",
        "smaller_metrics",
        "mid_line_offset",
        "old_smaller_offset",
        "bad_tail",
    ],
)
def test_a_tampered_checkpoint_is_a_clear_store_error_and_loses_nothing(
    tmp_path: Path, kind: str
) -> None:
    run = tmp_path / "run"
    _train(run, TableLearner(), steps=4, checkpoint_every=2)
    ckpt = latest_checkpoint(run)
    assert ckpt is not None and ckpt.name == "step-000004.pt"
    marker = tmp_path / "payload-ran"
    _tamper(ckpt, kind, marker)
    before = {name: (run / name).read_bytes() for name in RUN_FILES}
    with pytest.raises(StoreError, match=r"step-000004\.pt"):
        _train(run, TableLearner(), steps=6, checkpoint_every=2, resume=True)
    assert not marker.exists(), "opening a checkpoint ran code"
    assert {name: (run / name).read_bytes() for name in RUN_FILES} == before


def test_after_a_bad_checkpoint_is_deleted_the_one_before_resumes_exactly(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _train(run, TableLearner(), steps=4, checkpoint_every=2)
    ckpt = latest_checkpoint(run)
    assert ckpt is not None
    _tamper(ckpt, "truncated", tmp_path / "unused")
    with pytest.raises(StoreError, match="Delete it"):
        _train(run, TableLearner(), steps=6, checkpoint_every=2, resume=True)
    ckpt.unlink()  # what the message says to do
    learner = TableLearner()
    result = _train(run, learner, steps=6, checkpoint_every=2, resume=True)
    assert "step 2" in result.notes[0]
    assert learner.version == 6 and len(learner.seen) == 4  # steps 3..6, each once
    assert [m.step for m in read_metrics(run / "metrics.jsonl")] == list(range(1, 7))
    trajs = _trajectories(run)
    assert len({t.episode_id for t in trajs}) == len(trajs)
    steps = sorted({t.info["learner_step"] for t in trajs if "learner_step" in t.info})
    assert steps == list(range(1, 7))


def test_a_learner_that_fails_mid_run_loses_nothing_on_resume(tmp_path: Path) -> None:
    class Breaks(TableLearner):
        def __init__(self, fail_at: int | None) -> None:
            super().__init__()
            self.fail_at = fail_at

        def step(self, batch: Any) -> dict[str, float]:
            if self.version == self.fail_at:
                raise RuntimeError("the learner's bug")
            return super().step(batch)

    run = tmp_path / "run"
    with pytest.raises(RuntimeError, match="the learner's bug"):
        _train(run, Breaks(3), steps=6, checkpoint_every=2)
    learner = Breaks(None)
    result = _train(run, learner, steps=6, checkpoint_every=2, resume=True)
    assert "step 2" in result.notes[0] and learner.version == 6 and len(learner.seen) == 4
    assert [m.step for m in read_metrics(run / "metrics.jsonl")] == list(range(1, 7))
    trajs = _trajectories(run)
    assert len({t.episode_id for t in trajs}) == len(trajs)


class _TensorLearner(TableLearner):
    """A table learner that also holds a real torch module in its state."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.head = torch.nn.Linear(2, 2)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "head": dict(self.head.state_dict())}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["head"])  # torch's own error on a shape mismatch
        super().load_state_dict(state)


@pytest.mark.parametrize("change", ["shape", "missing"])
def test_a_checkpoint_the_learner_cannot_take_is_a_clear_store_error(
    tmp_path: Path, change: str
) -> None:
    run = tmp_path / "run"
    _train(run, _TensorLearner(), steps=4, checkpoint_every=2)
    ckpt = latest_checkpoint(run)
    assert ckpt is not None
    good = torch.load(ckpt, weights_only=True)
    if change == "shape":
        good["learner"]["head"]["weight"] = torch.zeros(3, 3)
    else:
        del good["learner"]["head"]["bias"]
    torch.save(good, ckpt)
    before = {name: (run / name).read_bytes() for name in RUN_FILES}
    with pytest.raises(StoreError, match=r"step-000004\.pt.*RuntimeError"):
        _train(run, _TensorLearner(), steps=6, checkpoint_every=2, resume=True)
    assert {name: (run / name).read_bytes() for name in RUN_FILES} == before


def test_what_was_recorded_after_the_checkpoint_is_set_aside_not_lost(tmp_path: Path) -> None:
    """A run killed after its checkpoint recorded more episodes; the resume redoes those steps,
    and the lines it sets aside are kept beside the file, byte for byte."""
    run = tmp_path / "run"
    _train(run, TableLearner(), steps=4, checkpoint_every=2)
    last = latest_checkpoint(run)
    assert last is not None and last.name == "step-000004.pt"
    last.unlink()  # as if killed before it was written: steps 3 and 4 are past step 2's
    whole = (run / "trajectories.jsonl").read_bytes()
    result = _train(run, TableLearner(), steps=4, checkpoint_every=2, resume=True)
    aside = run / "trajectories.jsonl.after-step-2"
    assert aside.exists() and whole.endswith(aside.read_bytes()) and aside.read_bytes()
    assert any("after-step-2" in n for n in result.notes)


@pytest.mark.parametrize("name", ["trajectories.jsonl", "metrics.jsonl"])
def test_resume_refuses_run_files_cut_shorter_than_the_checkpoint(
    tmp_path: Path, name: str
) -> None:
    run = tmp_path / "run"
    _train(run, TableLearner(), steps=4, checkpoint_every=2)
    path = run / name
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: len(lines) // 2]))
    with pytest.raises(StoreError, match=name):
        _train(run, TableLearner(), steps=6, checkpoint_every=2, resume=True)


# --- the held-out comparison ------------------------------------------------------------------


class _Outage(Agent):
    """Always answers queue_team, but raises ModelUnavailable on sev1 tickets (where queue_team is
    costly), or on every ticket with ``always``: a model server down, or an agent dodging."""

    name = "outage"

    def __init__(self, always: bool) -> None:
        self.always = always
        self._prompt = ""

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=f"outage:{self.always}", harness="scripted:outage")

    async def start(self, ctx: EpisodeContext) -> None:
        self._prompt = ctx.prompt

    async def act(self, observation: Observation) -> Action:
        if self.always or "severity: sev1" in self._prompt:
            raise ModelUnavailable("the model server is unreachable")
        return Action(text="queue_team")


def _heldout(tmp_path: Path, always: bool, policy: str = "exclude") -> Any:
    from envlab.envs.triage import TriageEnv
    from envlab.train.decision import decision
    from envlab.train.heldout import Contender, evaluate_heldout

    spec = TriageEnv()
    tasks = spec.tasks(n=60, split="test")
    contenders = [
        Contender("trained", AgentClass(_Outage, always)),
        Contender("random", decision(), floor=True),
        Contender("optimum", AgentClass(OracleAgent), best=True),
    ]
    return tasks, asyncio.run(
        evaluate_heldout(spec, tasks, contenders, tmp_path / "heldout", split="test",
                         concurrency=8, config=EpisodeConfig(max_retries=0,
                                                             model_failures=policy))
    )  # fmt: skip


def test_heldout_reports_no_mean_for_an_agent_whose_episodes_all_failed(tmp_path: Path) -> None:
    """Refusing the comparison (it names why) or a row without a mean: both defend."""
    try:
        _, h = _heldout(tmp_path, always=True)
    except ConfigError as e:
        assert "no scored episode" in str(e) or "has a scored episode" in str(e)
        return
    row = next(r for r in h.rows if r.name == "trained")
    assert row.n_scored == 0 and row.n_excluded == 60
    assert row.mean is None and row.low is None and row.high is None
    assert row.fraction_of_best is None and row.gap_closed is None
    assert all(p.diff is None or "trained" not in (p.a, p.b) for p in h.paired)


def test_heldout_scores_the_agents_own_model_failures_as_zero(tmp_path: Path) -> None:
    """By default the agent's model failing is the agent's failure: nothing is excluded, the
    sev1 tickets its model 'could not reach' score 0 and the comparison is over every task."""
    _, h = _heldout(tmp_path, always=False, policy="agent")
    row = next(r for r in h.rows if r.name == "trained")
    assert row.n_excluded == 0 and row.n_scored == 60 and row.mean is not None
    _, h_all = _heldout(tmp_path / "all", always=True, policy="agent")
    row_all = next(r for r in h_all.rows if r.name == "trained")
    assert row_all.n_scored == 60 and row_all.mean == 0.0


def test_heldout_fraction_of_best_is_over_the_same_tasks(tmp_path: Path) -> None:
    from envlab.envs.triage import bayes_action, realized_reward

    tasks, h = _heldout(tmp_path, always=False)
    row = next(r for r in h.rows if r.name == "trained")
    assert 0 < row.n_excluded < 60 and row.mean is not None
    if row.fraction_of_best is None:
        return  # not reported as complete: defended
    kept = [t for t in tasks if "severity: sev1" not in t.prompt]
    best_here = sum(realized_reward(t, bayes_action(t)) for t in kept) / len(kept)
    assert row.fraction_of_best == pytest.approx(row.mean / best_here)


# --- the decision learner on the real triage environment --------------------------------------


def _slow_decision_learner() -> Any:
    """A ``DecisionLearner`` whose own agents run out of time on a quarter of the seeds (a
    machine too busy, a policy too slow): the agent's failure, graded 0."""
    from envlab.envs.triage import OPTIONS
    from envlab.train.decision import DecisionAgent, DecisionPolicy
    from envlab.train.decision_learner import DecisionConfig, DecisionLearner

    class SlowAgent(DecisionAgent):
        async def start(self, ctx: EpisodeContext) -> None:
            await super().start(ctx)
            self._slow = ctx.seed % 4 == 0

        async def act(self, observation: Observation) -> Action:
            if self._slow:
                await asyncio.sleep(30)
            return await super().act(observation)

    class SlowPolicy(DecisionPolicy):
        def new_agent(self) -> Agent:
            return SlowAgent(self)

    class SlowLearner(DecisionLearner):
        def policy(self, *, greedy: bool = False) -> DecisionPolicy:
            return SlowPolicy(self.weights, greedy=greedy)

    return SlowLearner(OPTIONS, DecisionConfig(dim=1 << 10, hidden=8, seed=1))


def test_the_decision_learner_learns_from_its_agents_timeouts(tmp_path: Path) -> None:
    from envlab.envs.triage import TriageEnv

    spec = TriageEnv(size=8)
    learner = _slow_decision_learner()
    config = TrainConfig(steps=2, groups_per_step=2, group_size=4, sync=True)
    asyncio.run(
        train(spec, spec.tasks(split="train"), learner, out_dir=tmp_path, config=config,
              episode_config=FAST, command=["redteam"])
    )  # fmt: skip
    assert learner.version == 2
    late = [t for t in _trajectories(tmp_path) if t.status is Status.TIMEOUT]
    assert late and all(t.reward == 0.0 and "learner_step" in t.info for t in late)


def test_the_decision_agent_refuses_a_checkpoint_holding_code(tmp_path: Path) -> None:
    from envlab.train.decision import decision

    marker = tmp_path / "payload-ran"
    path = tmp_path / "policy.pt"
    torch.save({"format": "envlab.decision.policy/1", "weights": _Payload(str(marker))}, path)
    with pytest.raises(ConfigError, match="cannot read decision-policy checkpoint"):
        decision(checkpoint=str(path))
    assert not marker.exists()
