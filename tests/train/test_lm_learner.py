"""LMLearner on a tiny Llama (tests/train/conftest.py) and real ``arith`` episodes played by
its own snapshot agents: token-exact ratios, learning on the recorded tokens, frozen snapshots,
seeded sampling, state through a file, determinism, bad token views refused by name."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from envlab.core import (  # noqa: E402
    Component,
    ConfigError,
    EnvSpec,
    GradingContext,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolEnv,
    Trajectory,
)
from envlab.envs.arith import ArithEnv  # noqa: E402
from envlab.rollout.driver import PlannedEpisode, episode_ids_in_group, run_episodes  # noqa: E402
from envlab.train.learner import Group, Learner  # noqa: E402
from envlab.train.lm_learner import LMLearner  # noqa: E402
from tests.train.conftest import tiny_model, tiny_tokenizer  # noqa: E402

SPEC = ArithEnv(level=1)
AGENT = {"max_tokens": 10, "max_turns": 1, "instructions": ""}  # short prompts: fast
GROUPS, SIZE = 2, 4


def _learner(tok: Any, **kw: Any) -> LMLearner:
    """A learner over a fresh tiny model: every fresh model has the same weights (seed 0)."""
    return LMLearner(tiny_model(len(tok)), tok, lr=kw.pop("lr", 3e-3), agent_kwargs=AGENT, **kw)


def _play(agents: Any, groups: int = GROUPS) -> list[Trajectory]:
    tasks = list(SPEC.tasks(n=groups, split="train"))
    plan = [
        PlannedEpisode(task, s, episode_ids_in_group(f"{0xABC0 + i:016x}", s), agents)
        for i, task in enumerate(tasks)
        for s in range(SIZE)
    ]
    return asyncio.run(run_episodes(SPEC, plan, concurrency=4))


def _groups(trajs: list[Trajectory], rewards: list[float] | None = None) -> list[Group]:
    """Groups of SIZE in plan order; ``rewards`` (per sample index) replace arith's grade,
    which is 0 for every reply of a random tiny model: the test sets the signal."""
    out = []
    for i in range(0, len(trajs), SIZE):
        ts = trajs[i : i + SIZE]
        if rewards is not None:
            ts = [dataclasses.replace(t, reward=rewards[k]) for k, t in enumerate(ts)]
        out.append(Group(i // SIZE, ts[0].group_id, ts[0].task_id, 0, tuple(ts)))
    return out


@pytest.fixture(scope="module")
def recorded() -> tuple[Any, list[Trajectory]]:
    """Arith episodes played by the v0 snapshot of a fresh tiny model (shared, read-only)."""
    tok = tiny_tokenizer()
    trajs = _play(_learner(tok).policy())
    assert all(t.scored and t.tokens is not None for t in trajs)
    return tok, trajs


def _completion_logp(learner: LMLearner, t: Trajectory) -> float:
    """The summed logprob of ``t``'s model tokens under the learner's current weights."""
    from envlab.train.lm_batch import checked as _checked
    from envlab.train.lm_batch import pack as _pack

    packed = _pack([_checked(t, 0.0)], "cpu")
    with torch.no_grad():
        logps = learner._logps(packed)
    return float((logps * packed["mask"]).sum())


def _weights(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_is_a_learner_and_the_first_ratio_is_exact(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    learner = _learner(tok)
    assert isinstance(learner, Learner)
    before = _weights(learner.model)
    m = learner.step(_groups(trajs, [1.0, 0.0, 0.0, 0.0]))
    assert learner.version == 1
    assert all(isinstance(v, float) for v in m.values())
    assert m["tokens"] == sum(sum(t.tokens.loss_mask) for t in trajs if t.tokens)
    # the batch was sampled by these very weights: the recorded logprobs are the model's own
    assert abs(m["ratio_mean"] - 1.0) < 1e-4 and abs(m["kl"]) < 1e-6 and m["clip_frac"] == 0.0
    assert torch.isfinite(torch.tensor(m["loss"])) and m["grad_norm"] > 0
    assert any(not torch.equal(before[k], v) for k, v in learner.model.state_dict().items())


def test_padding_and_unmasked_tokens_change_no_logprob(
    recorded: tuple[Any, list[Trajectory]],
) -> None:
    """Prompts of different lengths (left padding), a completion cut short (right padding),
    and tokens outside the loss mask whose recorded logprobs are garbage (as a tool
    response's are): the counted tokens' ratios stay exactly those of the behaviour policy."""
    tok, trajs = recorded
    assert len({len(t.tokens.prompt_ids) for t in trajs if t.tokens}) > 1
    a, b = trajs[1].tokens, trajs[2].tokens
    assert a is not None and b is not None
    cut = dataclasses.replace(
        a, completion_ids=a.completion_ids[:4], loss_mask=a.loss_mask[:4], logprobs=a.logprobs[:4]
    )
    hidden = dataclasses.replace(
        b, loss_mask=[0, 0, 0, *b.loss_mask[3:]], logprobs=[-50.0] * 3 + b.logprobs[3:]
    )
    views = {1: cut, 2: hidden}
    edited = [
        dataclasses.replace(t, tokens=views[i]) if i in views else t for i, t in enumerate(trajs)
    ]
    m = _learner(tok).step(_groups(edited, [1.0, 0.0, 0.5, 0.0]))
    assert m["tokens"] == sum(sum(t.tokens.loss_mask) for t in edited if t.tokens)
    assert abs(m["ratio_mean"] - 1.0) < 1e-4 and abs(m["kl"]) < 1e-6


def test_a_positive_advantage_completion_gains_probability(
    recorded: tuple[Any, list[Trajectory]],
) -> None:
    tok, trajs = recorded
    learner = _learner(tok)
    batch = _groups(trajs, [1.0, 0.0, 0.0, 0.5])
    good, bad = batch[0].trajectories[0], batch[0].trajectories[1]
    good0, bad0 = _completion_logp(learner, good), _completion_logp(learner, bad)
    metrics = [learner.step(batch) for _ in range(4)]
    assert _completion_logp(learner, good) > good0 + 0.5
    assert _completion_logp(learner, bad) < bad0
    assert metrics[-1]["kl"] > 0  # the weights moved away from the behaviour policy
    assert learner.version == 4


def test_dead_groups_train_nothing_but_count(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded  # arith's own grade: 0 for every reply of the tiny model
    assert {t.reward for t in trajs} == {0.0}
    learner = _learner(tok)
    m = learner.step(_groups(trajs))
    assert m["dead_groups"] == GROUPS and m["loss"] == 0.0 and m["grad_norm"] == 0.0


def test_snapshot_is_frozen_and_made_once_per_version(
    recorded: tuple[Any, list[Trajectory]],
) -> None:
    tok, trajs = recorded
    learner = _learner(tok)
    agents = learner.policy()
    assert learner.policy() is agents and agents.version == 0
    assert agents.spec.model_id.endswith("@v0") and agents.model is not learner.model
    frozen = _weights(agents.model)
    agent = agents.new_agent()
    learner.step(_groups(trajs, [1.0, 0.0, 0.0, 0.0]))
    assert all(torch.equal(frozen[k], v) for k, v in agents.model.state_dict().items())
    assert agent._model.model is agents.model  # the agent made before the step acts with v0
    later = learner.policy()
    assert later is not agents and later.version == 1 and later.spec.model_id.endswith("@v1")
    assert any(not torch.equal(frozen[k], v) for k, v in later.model.state_dict().items())


def test_sampling_is_seeded_per_episode_and_leaves_the_global_generator(
    recorded: tuple[Any, list[Trajectory]],
) -> None:
    tok, trajs = recorded
    state = torch.get_rng_state()
    again = _play(_learner(tok).policy())
    assert torch.equal(torch.get_rng_state(), state)
    assert [t.tokens.completion_ids for t in again] == [t.tokens.completion_ids for t in trajs]
    assert len({tuple(t.tokens.completion_ids) for t in trajs}) == len(trajs)  # samples differ


def test_state_round_trips_through_a_file(
    recorded: tuple[Any, list[Trajectory]], tmp_path: Path
) -> None:
    tok, trajs = recorded
    batch = _groups(trajs, [1.0, 0.0, 0.0, 0.0])
    a = _learner(tok)
    a.step(batch)
    torch.save({"learner": a.state_dict()}, tmp_path / "ckpt.pt")
    b = _learner(tok, lr=1.0)  # the optimizer's settings come back from the state too
    b.load_state_dict(torch.load(tmp_path / "ckpt.pt", weights_only=True)["learner"])
    assert b.version == 1 and b.policy().version == 1
    a.step(batch)
    b.step(batch)
    assert b.version == 2
    assert all(torch.equal(v, b.model.state_dict()[k]) for k, v in a.model.state_dict().items())


def test_same_seed_same_batch_same_weights(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    batch = _groups(trajs, [1.0, 0.0, 0.25, 0.0])
    a, b = _learner(tok, seed=3), _learner(tok, seed=3)
    for _ in range(2):
        a.step(batch), b.step(batch)
    wb = b.model.state_dict()
    assert all(torch.equal(v, wb[k]) for k, v in a.model.state_dict().items())


def test_micro_batches_sum_to_the_batch(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    batch = _groups(trajs, [1.0, 0.0, 0.25, 0.0])
    whole, parts = _learner(tok).step(batch), _learner(tok, micro_batch_size=3).step(batch)
    for key in ("loss", "grad_norm", "tokens"):
        assert parts[key] == pytest.approx(whole[key], rel=1e-4, abs=1e-8)


def test_grpo_and_dapo_agree_on_equal_lengths(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    batch = _groups(trajs, [1.0, 0.0, 0.0, 0.0])
    lengths = {sum(t.tokens.loss_mask) for t in trajs if t.tokens}
    assert len(lengths) == 1  # every reply ran to max_tokens: the two means are one
    dapo = _learner(tok).step(batch)
    grpo = _learner(tok, loss_type="grpo").step(batch)
    for key in ("loss", "grad_norm"):  # the loss is ~0 at the behaviour weights; its gradient not
        assert grpo[key] == pytest.approx(dapo[key], rel=1e-4, abs=1e-7)


def test_a_bad_token_view_is_refused_by_name(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    learner = _learner(tok)
    victim = trajs[2]
    assert victim.tokens is not None
    n = len(victim.tokens.completion_ids)
    short = dataclasses.replace(victim.tokens, logprobs=victim.tokens.logprobs[:-1])
    alien = dataclasses.replace(victim.tokens, completion_ids=[10**6] * n)  # another vocabulary
    for view, why in ((short, "disagree"), (alien, "vocabulary")):
        batch_trajs = [*trajs[:2], dataclasses.replace(victim, tokens=view), *trajs[3:]]
        with pytest.raises(ConfigError, match=f"{victim.episode_id}.*{why}"):
            learner.step(_groups(batch_trajs, [1.0, 0.0, 0.0, 0.0]))
    assert learner.version == 0  # nothing was taken


def test_an_unscored_trajectory_is_refused(recorded: tuple[Any, list[Trajectory]]) -> None:
    tok, trajs = recorded
    unscored = [dataclasses.replace(t, reward=None) if i == 1 else t for i, t in enumerate(trajs)]
    with pytest.raises(ConfigError, match=trajs[1].episode_id):
        _learner(tok).step(_groups(unscored))


# --- through the loop -------------------------------------------------------------------------
def _ascii(ctx: GradingContext) -> float:
    """The share of the reply's characters that are printable ASCII: a graded signal the tiny
    random model gets a spread of (arith's grade is 0 for all its replies)."""
    text = ctx.final_answer or ""
    return sum(" " <= ch <= "~" for ch in text) / len(text) if text else 0.0


class AsciiEpisode(ToolEnv):
    rubric = Rubric([Component("ascii", _ascii, description="printable ASCII share")])


class AsciiEnv(EnvSpec):
    """Say anything; the reward is how much of it is printable ASCII."""

    id = "ascii-share"
    environment = AsciiEpisode
    default_limits = Limits(max_steps=1)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "train") -> TaskSet:
        tasks = [Task(id=f"say-{i}", prompt=f"Say something ({i}).") for i in range(n or 2)]
        return TaskSet(tasks, seed=seed, name=self.id)


def _train(tmp: Path, tok: Any, *, sync: bool = True, steps: int = 2) -> tuple[LMLearner, Any]:
    from envlab.train.loop import TrainConfig, train

    spec, learner = AsciiEnv(), _learner(tok)
    config = TrainConfig(steps=steps, groups_per_step=2, group_size=3, sync=sync, concurrency=3)
    result = asyncio.run(
        train(spec, spec.tasks(), learner, out_dir=tmp, config=config, command=["test"])
    )
    return learner, result


def test_the_loop_drives_it_in_sync_mode_deterministically(tmp_path: Path) -> None:
    from envlab.runs import TrajectoryStore
    from envlab.train.checkpoint import latest_checkpoint

    tok = tiny_tokenizer()
    runs = [_train(tmp_path / name, tok) for name in ("a", "b")]
    (a, ra), (b, rb) = runs
    assert a.version == 2 and ra.state.step == 2
    assert [m.learner["tokens"] > 0 and m.dead_groups < 1 for m in ra.metrics] == [True, True]
    assert ra.metrics[1].learner["kl"] >= 0 and "clip_frac" in ra.metrics[1].learner
    trajs = [TrajectoryStore(r.run_dir / "trajectories.jsonl").load() for r in (ra, rb)]
    assert {t.info["policy_version"] for t in trajs[0]} == {0, 1}
    assert [t.tokens.completion_ids for t in trajs[0]] == [
        t.tokens.completion_ids for t in trajs[1]
    ]
    wb = b.model.state_dict()
    assert all(torch.equal(v, wb[k]) for k, v in a.model.state_dict().items())
    ckpt = torch.load(latest_checkpoint(ra.run_dir), weights_only=True)
    fresh = _learner(tok)
    fresh.load_state_dict(ckpt["learner"])
    assert fresh.version == 2
    assert all(torch.equal(v, fresh.model.state_dict()[k]) for k, v in a.model.state_dict().items())


def test_the_loop_drives_it_async_within_the_staleness_bound(tmp_path: Path) -> None:
    """Rollouts with the snapshots while the learner steps in its worker thread."""
    from envlab.runs import TrajectoryStore

    learner, result = _train(tmp_path, tiny_tokenizer(), sync=False)
    assert learner.version == 2 and [m.step for m in result.metrics] == [1, 2]
    assert all(int(age) <= 1 for m in result.metrics for age in m.staleness)
    for m in result.metrics:
        assert all(math.isfinite(v) for v in m.learner.values()) and m.learner["tokens"] > 0
    trajs = TrajectoryStore(result.run_dir / "trajectories.jsonl").load()
    learned = [t for t in trajs if "learner_step" in t.info]
    assert learned and all(
        t.agent.model_id.endswith(f"@v{t.info['policy_version']}") for t in learned
    )


def test_the_cli_factory_loads_a_saved_model(tmp_path: Path) -> None:
    """``envlab train ENV --learner envlab.train.lm_learner:lm_learner --learner-arg model=DIR``."""
    from envlab.train.lm_learner import lm_learner

    tok = tiny_tokenizer()
    saved = tiny_model(len(tok))
    saved.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    spec = AsciiEnv()
    learner = lm_learner(
        spec=spec, tasks=spec.tasks(seed=5), model=str(tmp_path), lr=0.01, max_turns=1
    )
    assert learner.seed == 5 and learner.optimizer.param_groups[0]["lr"] == 0.01
    loaded = learner.model.state_dict()
    assert all(torch.equal(v, loaded[k]) for k, v in saved.state_dict().items())
    assert learner.policy().spec.limits["max_turns"] == 1
    with pytest.raises(ConfigError, match="torch dtype"):
        lm_learner(model=str(tmp_path), dtype="float3")
    with pytest.raises(ConfigError, match="cannot load"):
        lm_learner(model=str(tmp_path / "absent"))
    with pytest.raises(ConfigError, match="learner-arg"):
        lm_learner(model=str(tmp_path), learning_rate=0.1)
