"""The decision model: hashed features, the frozen-snapshot agents, the learner's update,
its checkpoints and the ``decision`` agent entry point."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from envlab.agents import load_agent
from envlab.core import (
    Action,
    AgentFactory,
    ConfigError,
    EpisodeContext,
    Observation,
    Status,
    StepRecord,
    Trajectory,
)
from envlab.train.features import featurize, parse_fields, parse_options, time_bucket
from envlab.train.learner import Group, Learner

torch = pytest.importorskip("torch")

from envlab.train.decision import (  # noqa: E402
    DecisionPolicy,
    decision,
    load_policy,
    read_decision,
)
from envlab.train.decision_learner import DecisionConfig, DecisionLearner  # noqa: E402

OPTIONS = ("page_oncall", "open_incident", "queue_team", "auto_remediate", "close_duplicate")
SMALL = DecisionConfig(dim=1 << 10, hidden=16, lr=0.05, seed=3)


def ticket(
    service: str = "checkout",
    severity: str = "sev2",
    tier: str = "enterprise",
    codes: str = "E503, DB_TIMEOUT",
    time: str = "03:40",
    text: str = "Checkout pages time out since the deploy",
    options: tuple[str, ...] = OPTIONS,
) -> str:
    return (
        "Route this operations ticket to exactly one of the options.\n\n"
        f"service: {service}\nseverity: {severity}\ncustomer_tier: {tier}\n"
        f"error_codes: {codes}\ntime: {time}\ntext: {text}\n\n"
        f"Options: {', '.join(options)}\nAnswer with exactly one option name.\n"
    )


# a toy rule per ticket: the option worth 1 (all others 0)
TOY = {
    ticket(severity="sev1"): "page_oncall",
    ticket(severity="sev3", tier="free", codes="none"): "queue_team",
    ticket(
        severity="sev2", codes="DUP_OF_4411", text="same as the earlier ticket"
    ): "close_duplicate",
    ticket(service="search", severity="sev3", codes="DISK_FULL", time="14:05"): "auto_remediate",
}


def act(factory: AgentFactory, prompt: str, seed: int) -> Action:
    async def go() -> Action:
        agent = factory.new_agent()
        await agent.start(EpisodeContext(task_id="t", prompt=prompt, tools=[], seed=seed))
        try:
            return await agent.act(Observation(text=prompt))
        finally:
            await agent.close()

    return asyncio.run(go())


def trajectory(
    factory: AgentFactory, prompt: str, action: Action, reward: float, i: int
) -> Trajectory:
    return Trajectory(
        episode_id=f"ep-{i}",
        task_id="t",
        group_id="g",
        sample_index=i,
        reward=reward,
        status=Status.OK,
        env_id="toy",
        env_hash="h",
        seed=i,
        agent=factory.spec,
        messages=[{"role": "user", "content": prompt}, action.to_message()],
        steps=[StepRecord(index=0, message_index=1, action=action)],
    )


def toy_batch(learner: DecisionLearner, step: int, size: int = 6) -> list[Group]:
    """One group per toy ticket, played by the learner's current policy."""
    groups = []
    factory = learner.policy()
    for g, (prompt, best) in enumerate(TOY.items()):
        trajs = []
        for s in range(size):
            a = act(factory, prompt, seed=step * 1000 + g * 100 + s)
            trajs.append(trajectory(factory, prompt, a, float(a.text == best), s))
        groups.append(Group(g, f"g{g}", f"t{g}", learner.version, tuple(trajs)))
    return groups


# --- features ---------------------------------------------------------------------------------
def test_features_parse_the_ticket_format() -> None:
    p = ticket(codes="none", time="23:59")
    assert parse_options(p) == OPTIONS
    fields = parse_fields(p)
    assert fields["severity"] == "sev2" and fields["text"].startswith("Checkout")
    assert "options" not in fields
    names = set(featurize(p, 1 << 12).names)
    assert {"severity=sev2", "error_codes=none", "tod=evening", "w:deploy", "b:time out"} <= names
    assert "customer_tier=enterprise&severity=sev2" in names  # a pairwise cross
    codes = set(featurize(ticket(), 1 << 12).names)
    assert {"error_codes=e503", "error_codes=db_timeout"} <= codes
    assert time_bucket("03:40") == ("night", "03") and time_bucket("noon") == ("?", "?")


def test_a_prompt_without_options_line_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="Options:"):
        parse_options("service: checkout\nseverity: sev1\n")
    with pytest.raises(ConfigError, match="no options"):
        parse_options("Options: , \n")


def test_features_are_the_same_in_another_process() -> None:
    p = ticket()
    here = list(featurize(p, 1 << 14).indices)
    code = (
        "import json, sys; from envlab.train.features import featurize; "
        "print(json.dumps(list(featurize(sys.stdin.read(), 1 << 14).indices)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        input=p,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(out.stdout) == here
    assert len(set(here)) > 20  # not all in one bucket


def test_the_uniform_policy_never_imports_torch() -> None:
    code = (
        "import sys, asyncio\n"
        "from envlab.train.decision import decision\n"
        "from envlab.core import EpisodeContext, Observation\n"
        "f = decision()\n"
        "a = f.new_agent()\n"
        f"p = {ticket()!r}\n"
        "asyncio.run(a.start(EpisodeContext(task_id='t', prompt=p, tools=[], seed=1)))\n"
        "act = asyncio.run(a.act(Observation(text=p)))\n"
        "assert act.text in p, act\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# --- agents and snapshots ---------------------------------------------------------------------
def test_the_learner_is_a_learner_and_its_agents_answer_an_option() -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    assert isinstance(learner, Learner) and learner.version == 0
    a = act(learner.policy(), ticket(), seed=5)
    assert a.text in OPTIONS and OPTIONS[a.info["choice"]] == a.text
    assert a.info["logprob"] < 0
    assert learner.policy().spec.name == "decision"
    assert learner.policy().spec.weights_hash


def test_an_agent_made_before_a_step_acts_the_same_after_it() -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    before = learner.policy()
    made = before.new_agent()  # made before the steps, started after them
    seen = [act(before, p, seed=s) for p in TOY for s in range(5)]
    for step in range(5):
        learner.step(toy_batch(learner, step))
    assert learner.version == 5
    assert learner.policy().spec.weights_hash != before.spec.weights_hash
    again = [act(before, p, seed=s) for p in TOY for s in range(5)]
    assert [(a.text, a.info["logprob"]) for a in again] == [
        (a.text, a.info["logprob"]) for a in seen
    ]
    assert made.spec == before.spec and before.version == 0


def test_same_seed_and_batches_give_identical_weights() -> None:
    a, b = DecisionLearner(OPTIONS, SMALL), DecisionLearner(OPTIONS, SMALL)
    for step in range(4):
        batch = toy_batch(a, step)
        ma, mb = a.step(batch), b.step(batch)
        assert ma == mb
    for k in ("embed", "b1", "w2", "b2"):
        assert np.array_equal(a.weights.arrays[k], b.weights.arrays[k])
    other = DecisionLearner(OPTIONS, DecisionConfig(dim=1 << 10, hidden=16, seed=4))
    assert not np.array_equal(other.weights.arrays["embed"], a.weights.arrays["embed"])


def test_the_ratio_is_taken_against_the_behaviour_logprob_of_stale_samples() -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    stale = toy_batch(learner, 0)  # played by version 0
    for step in range(1, 4):
        learner.step(toy_batch(learner, step))
    fresh = toy_batch(learner, 9)
    other = DecisionLearner(OPTIONS, SMALL)
    other.load_state_dict(learner.state_dict())
    on_policy = learner.step(fresh)
    off_policy = other.step(stale)  # three versions old: ratio != 1, clipped where far
    assert abs(on_policy["approx_kl"]) < 1e-5 and on_policy["clip_frac"] == 0.0
    assert abs(off_policy["approx_kl"]) > 1e-3
    assert learner.version == other.version == 4


def test_state_dict_round_trips_through_torch_load_weights_only(tmp_path: Path) -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    for step in range(3):
        learner.step(toy_batch(learner, step))
    path = tmp_path / "ckpt.pt"
    torch.save({"learner": learner.state_dict(), "loop": {"step": 3}}, path)
    state = torch.load(path, weights_only=True)["learner"]
    resumed = DecisionLearner(OPTIONS, SMALL)
    resumed.load_state_dict(state)
    assert resumed.version == 3
    assert resumed.policy().spec.weights_hash == learner.policy().spec.weights_hash
    batch = toy_batch(learner, 3)
    assert learner.step(batch) == resumed.step(batch)  # Adam's moments came back too
    for k in ("embed", "b1", "w2", "b2"):
        assert np.array_equal(learner.weights.arrays[k], resumed.weights.arrays[k])
    wrong = DecisionLearner(OPTIONS, DecisionConfig(dim=1 << 11, hidden=16))
    with pytest.raises(ConfigError, match="same settings"):
        wrong.load_state_dict(state)


# --- the entry point --------------------------------------------------------------------------
def test_decision_without_checkpoint_is_the_uniform_policy() -> None:
    factory = load_agent("decision")
    assert isinstance(factory, DecisionPolicy) and factory.spec.model_id == "uniform"
    acts = [act(factory, ticket(), seed=s) for s in range(60)]
    assert {a.text for a in acts} == set(OPTIONS)
    assert all(math.isclose(a.info["logprob"], -math.log(5)) for a in acts)
    assert [a.text for a in acts] == [act(factory, ticket(), seed=s).text for s in range(60)]
    with pytest.raises(ConfigError, match="unknown argument"):
        load_agent("decision", temperature=0.5)
    with pytest.raises(ConfigError, match="greedy"):
        decision(greedy="yes")  # type: ignore[arg-type]


def test_decision_with_checkpoint_plays_the_saved_policy(tmp_path: Path) -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    for step in range(25):
        learner.step(toy_batch(learner, step))
    learner.save_policy(tmp_path / "policy.pt")
    torch.save({"learner": learner.state_dict(), "loop": {}}, tmp_path / "train.pt")
    for name in ("policy.pt", "train.pt"):
        path = str(tmp_path / name)
        greedy = load_agent("decision", checkpoint=path)
        assert greedy.spec.weights_hash == learner.policy().spec.weights_hash
        assert greedy.spec.sampling == {"greedy": True}
        # greedy: the same answer whatever the seed, and the learner's argmax
        for prompt in TOY:
            answers = {act(greedy, prompt, seed=s).text for s in range(5)}
            lps = load_policy(path).logprobs(featurize(prompt, SMALL.dim).indices)
            assert answers == {OPTIONS[max(range(5), key=lambda i: lps[i])]}
        sampled = load_agent("decision", checkpoint=path, greedy=False)
        assert sampled.spec.sampling == {"greedy": False}
    with pytest.raises(ConfigError, match="no decision-policy checkpoint"):
        decision(checkpoint=str(tmp_path / "missing.pt"))
    old = torch.load(tmp_path / "policy.pt", weights_only=True)
    torch.save({**old, "features": "triage-hash/0"}, tmp_path / "old.pt")
    with pytest.raises(ConfigError, match="train it again"):
        decision(checkpoint=str(tmp_path / "old.pt"))
    torch.save({"weights": {}}, tmp_path / "foreign.pt")
    with pytest.raises(ConfigError, match="not a decision policy"):
        decision(checkpoint=str(tmp_path / "foreign.pt"))
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(ConfigError, match="cannot read"):
        decision(checkpoint=str(tmp_path / "junk.pt"))


def test_a_model_refuses_a_prompt_with_other_options() -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    with pytest.raises(ConfigError, match="not the options"):
        act(learner.policy(), ticket(options=("yes", "no")), seed=0)
    reordered = tuple(reversed(OPTIONS))
    a = act(learner.policy(greedy=True), ticket(options=reordered), seed=0)
    b = act(learner.policy(greedy=True), ticket(), seed=0)
    assert a.text == b.text and math.isclose(a.info["logprob"], b.info["logprob"], rel_tol=1e-6)


# --- bad samples ------------------------------------------------------------------------------
def _bad(learner: DecisionLearner, action: Action, **changes: Any) -> list[Group]:
    factory = learner.policy()
    good = act(factory, ticket(), seed=1)
    trajs = (
        trajectory(factory, ticket(), good, 1.0, 0),
        trajectory(factory, ticket(), action, 0.0, 1),
    )
    for k, v in changes.items():
        setattr(trajs[1], k, v)
    return [Group(0, "g", "t", 0, trajs)]


@pytest.mark.parametrize(
    ("action", "changes", "match"),
    [
        (Action(text="page oncall please", info={"logprob": -1.0}), {}, "not one of the options"),
        (Action(text="queue_team", info={}), {}, "behaviour logprob"),
        (Action(text="queue_team", info={"logprob": -1.0, "choice": 0}), {}, "choice"),
        (Action(text="queue_team", info={"logprob": -1.0}), {"messages": []}, "no user message"),
        (Action(text="queue_team", info={"logprob": True}), {}, "behaviour logprob"),
        (
            Action(text="queue_team", info={"logprob": -1.0}),
            {"status": Status.INFRA_ERROR, "reward": None},
            "no valid grade",
        ),
    ],
)
def test_a_trajectory_the_learner_cannot_read_is_a_clear_error(
    action: Action, changes: dict[str, Any], match: str
) -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    with pytest.raises(ConfigError, match=match):
        learner.step(_bad(learner, action, **changes))
    assert learner.version == 0  # nothing was learned from a batch with a bad sample
    traj = _bad(learner, action, **changes)[0].trajectories[1]
    if traj.scored:
        with pytest.raises(ConfigError):
            read_decision(traj, OPTIONS)


# --- samples without an action (the agent timed out or failed before acting) -------------------
def no_action(factory: AgentFactory, prompt: str, i: int, status: Status) -> Trajectory:
    """A graded episode in which the agent never acted: the prompt, no step, reward 0."""
    traj = trajectory(factory, prompt, Action(text=""), 0.0, i)
    traj.status, traj.messages, traj.steps = status, traj.messages[:1], []
    return traj


def _played(learner: DecisionLearner, rewards: list[float], seed: int = 0) -> list[Trajectory]:
    factory = learner.policy()
    return [
        trajectory(factory, ticket(), act(factory, ticket(), seed=seed + i), r, i)
        for i, r in enumerate(rewards)
    ]


def _same_weights(a: DecisionLearner, b: DecisionLearner) -> bool:
    return all(np.array_equal(a.weights.arrays[k], b.weights.arrays[k]) for k in a.weights.arrays)


@pytest.mark.parametrize("status", [Status.TIMEOUT, Status.AGENT_ERROR])
def test_a_sample_without_an_action_counts_in_its_group_but_adds_no_term(status: Status) -> None:
    """Its reward moves the others' advantages; it adds no policy-gradient or entropy term."""
    from envlab.train.features import decision_samples

    learner = DecisionLearner(OPTIONS, SMALL)
    acted = _played(learner, [1.0, 0.5])
    late = no_action(learner.policy(), ticket(), 2, status)
    samples = decision_samples(
        [Group(0, "g", "t", 0, (*acted, late))], OPTIONS, SMALL.dim, scale=False
    )
    assert samples.advantages == [0.5, 0.0]  # centred on (1 + 0.5 + 0) / 3, the timeout's 0 in
    assert samples.rewards == [1.0, 0.5, 0.0] and samples.no_action == 1
    assert len(samples.choices) == len(samples.offsets) == len(samples.behaviour) == 2
    with pytest.raises(ConfigError, match="no action"):
        read_decision(late, OPTIONS)  # it has no choice to read

    # rewards 1, -1 and the timeout's 0: the acted samples' advantages are those of (1, -1) alone,
    # so the same weights after the step mean the timeout added nothing to the loss
    with_late, without = DecisionLearner(OPTIONS, SMALL), DecisionLearner(OPTIONS, SMALL)
    acted = _played(with_late, [1.0, -1.0], seed=7)
    m = with_late.step([Group(0, "g", "t", 0, (*acted, late))])
    n = without.step([Group(0, "g", "t", 0, tuple(acted))])
    assert _same_weights(with_late, without) and with_late.version == without.version == 1
    assert m["no_action"] == 1.0 and m["samples"] == 3.0 and n["no_action"] == 0.0
    assert m["grad_norm"] > 0 and m["pg_loss"] == n["pg_loss"] and m["entropy"] == n["entropy"]


def test_a_batch_where_no_sample_acted_is_a_step_that_changes_no_weight() -> None:
    learner, fresh = DecisionLearner(OPTIONS, SMALL), DecisionLearner(OPTIONS, SMALL)
    before = learner.policy()
    timeouts = [
        Group(g, f"g{g}", f"t{g}", 0,
              tuple(no_action(before, p, i, Status.TIMEOUT) for i in range(4)))
        for g, p in enumerate(TOY)
    ]  # fmt: skip
    m = learner.step(timeouts)
    assert learner.version == 1 and learner.policy().version == 1
    assert learner.weights.digest == before.spec.weights_hash  # no gradient: nothing moved
    assert m["no_action"] == m["samples"] == 16.0 and m["reward_mean"] == 0.0
    assert m["grad_norm"] == 0.0 and m["dead_groups"] == 4.0
    assert learner.state_dict()["optimizer"]["state"] == {}  # Adam took no step either
    # so the next real batch moves the weights exactly as it would have without that step
    batch = toy_batch(fresh, 0)
    learner.step(batch), fresh.step(batch)
    assert _same_weights(learner, fresh) and learner.version == 2


def test_the_toy_rules_are_learned_from_reward_alone() -> None:
    learner = DecisionLearner(OPTIONS, SMALL)
    for step in range(30):
        learner.step(toy_batch(learner, step))
    greedy = learner.policy(greedy=True)
    right = sum(act(greedy, p, seed=0).text == best for p, best in TOY.items())
    assert right == len(TOY)


def test_decision_config_checks_its_settings() -> None:
    with pytest.raises(ConfigError, match="dim must be int"):
        DecisionConfig(dim="big")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="must be > 0"):
        DecisionConfig(lr=0.0)
    with pytest.raises(ConfigError, match="scale_advantages must be bool"):
        DecisionConfig(scale_advantages=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=">= 2 distinct options"):
        DecisionLearner(("only",), SMALL)


# --- real triage episodes ---------------------------------------------------------------------
def sync_train(
    spec: Any, tasks: list[Any], learner: DecisionLearner, steps: int, groups: int, size: int
) -> None:
    """The --sync loop by hand: a batch of groups with the current policy, then one step."""
    from envlab.rollout.driver import PlannedEpisode, episode_ids_in_group, group_id, run_episodes

    env_hash, index = spec.content_hash(), 0
    for _ in range(steps):
        factory = learner.policy()
        plan, meta = [], []
        for _ in range(groups):
            task = tasks[(index * 7919) % len(tasks)]
            gid = group_id(spec.id, env_hash, task.id, index)
            meta.append((index, gid, task.id))
            plan += [
                PlannedEpisode(task, s, episode_ids_in_group(gid, s), factory) for s in range(size)
            ]
            index += 1
        trajs = asyncio.run(run_episodes(spec, plan, concurrency=8))
        assert all(t.scored for t in trajs), {t.status for t in trajs}
        batch = [
            Group(i, gid, tid, factory.version, tuple(trajs[k * size : (k + 1) * size]))
            for k, (i, gid, tid) in enumerate(meta)
        ]
        learner.step(batch)


def mean_reward(spec: Any, factory: AgentFactory, tasks: list[Any]) -> float:
    from envlab.rollout.driver import PlannedEpisode, episode_ids, run_episodes

    plan = [PlannedEpisode(t, 0, episode_ids(spec.id, "eval", t.id, 1, 0), factory) for t in tasks]
    trajs = asyncio.run(run_episodes(spec, plan, concurrency=8))
    assert all(t.scored for t in trajs), {t.status for t in trajs}
    return sum(float(t.reward or 0.0) for t in trajs) / len(trajs)


def test_triage_reward_rises_well_above_the_uniform_policy() -> None:
    from envlab.envs.triage import TriageEnv

    spec = TriageEnv()
    train = list(spec.tasks(seed=0, n=1500, split="train"))
    test = list(spec.tasks(seed=0, n=400, split="test"))
    optimum = mean_reward(spec, load_agent("oracle"), test)
    uniform = mean_reward(spec, decision(), test)
    assert optimum - uniform > 0.2  # the environment leaves room to learn
    learner = DecisionLearner.for_tasks(train, DecisionConfig(seed=0))
    sync_train(spec, train, learner, steps=60, groups=32, size=8)
    trained = mean_reward(spec, learner.policy(greedy=True), test)
    assert trained >= uniform + 0.6 * (optimum - uniform), (trained, uniform, optimum)


def test_the_sync_loop_on_triage_is_reproducible() -> None:
    from envlab.envs.triage import TriageEnv

    spec = TriageEnv()
    train = list(spec.tasks(seed=0, n=64, split="train"))
    runs = []
    for _ in range(2):
        learner = DecisionLearner.for_tasks(train, SMALL)
        sync_train(spec, train, learner, steps=3, groups=8, size=4)
        runs.append(learner)
    assert runs[0].version == runs[1].version == 3
    assert runs[0].weights.digest == runs[1].weights.digest
    for k in ("embed", "b1", "w2", "b2"):
        assert np.array_equal(runs[0].weights.arrays[k], runs[1].weights.arrays[k])
