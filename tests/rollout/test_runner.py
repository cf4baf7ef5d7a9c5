from __future__ import annotations

from pathlib import Path

import pytest

from envlab.agents.scripted import NoopAgent, OracleAgent
from envlab.core import AgentClass, ConfigError
from envlab.envs.arith import ArithEnv
from envlab.rollout import rollout
from envlab.runs import RunInfo, TrajectoryStore

ORACLE, NOOP = AgentClass(OracleAgent), AgentClass(NoopAgent)


async def test_groups_and_deterministic_seeds(tmp_path: Path) -> None:
    env = ArithEnv()
    tasks = env.tasks(n=5)
    await rollout(env, ORACLE, tasks, out_dir=tmp_path / "a", samples=3)
    await rollout(env, ORACLE, tasks, out_dir=tmp_path / "b", samples=3)
    t1 = TrajectoryStore(tmp_path / "a" / "trajectories.jsonl").load()
    t2 = TrajectoryStore(tmp_path / "b" / "trajectories.jsonl").load()
    assert len(t1) == 15
    groups: dict[str, set[int]] = {}
    for t in t1:
        groups.setdefault(t.group_id, set()).add(t.sample_index)
    assert len(groups) == 5 and all(v == {0, 1, 2} for v in groups.values())
    key = lambda t: t.episode_id  # noqa: E731
    assert [(t.episode_id, t.seed) for t in sorted(t1, key=key)] == [
        (t.episode_id, t.seed) for t in sorted(t2, key=key)
    ]
    info = RunInfo.model_validate_json((tmp_path / "a" / "run.json").read_text())
    assert info.agent.privileged and info.samples == 3 and len(info.task_ids) == 5
    assert info.env_id == "arith" and {t.env_id for t in t1} == {"arith"}  # always spec.name


async def test_existing_run_needs_resume_and_same_config(tmp_path: Path) -> None:
    env = ArithEnv()
    tasks = env.tasks(n=3)
    await rollout(env, NOOP, tasks, out_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"already holds a run\. Pass --resume"):
        await rollout(env, NOOP, tasks, out_dir=tmp_path)
    with pytest.raises(ConfigError, match="differs from the recorded run in agent"):
        await rollout(env, ORACLE, tasks, out_dir=tmp_path, resume=True)
    r = await rollout(env, NOOP, tasks, out_dir=tmp_path, resume=True)
    assert r.new_episodes == 0 and r.skipped_episodes == 3


async def test_resume_after_partial_run(tmp_path: Path) -> None:
    env = ArithEnv()
    tasks = env.tasks(n=10)
    await rollout(env, ORACLE, tasks, out_dir=tmp_path, samples=2)
    store = TrajectoryStore(tmp_path / "trajectories.jsonl")
    lines = store.path.read_text().splitlines(keepends=True)
    store.path.write_text("".join(lines[:7]) + lines[7][:25])  # 7 whole lines and a torn one
    r = await rollout(env, ORACLE, tasks, out_dir=tmp_path, samples=2, resume=True)
    assert r.new_episodes == 13 and r.skipped_episodes == 7
    assert any("torn" in n for n in r.notes)
    ids = [t.episode_id for t in store.load()]
    assert len(ids) == 20 and len(set(ids)) == 20


async def test_resume_reruns_infra_errors_and_counts_each_episode_once(tmp_path: Path) -> None:
    from envlab.core import Status
    from envlab.measure import summarize
    from envlab.rollout import EpisodeConfig
    from tests.support.envs import EchoEnv, FlakyTransportAgent

    env = EchoEnv(n=3)
    cfg = EpisodeConfig(max_retries=0, retry_backoff=0, model_failures="exclude")
    key = f"resume-{tmp_path.name}"
    flaky = AgentClass(FlakyTransportAgent, 2, key)
    first = await rollout(env, flaky, env.tasks(), out_dir=tmp_path, config=cfg, concurrency=1)
    assert [r.status for r in first.records].count(Status.INFRA_ERROR.value) == 2
    again = await rollout(env, flaky, env.tasks(), out_dir=tmp_path, config=cfg, resume=True)
    assert again.new_episodes == 2 and again.skipped_episodes == 1
    store = TrajectoryStore(tmp_path / "trajectories.jsonl")
    assert len(store.load(every_record=True)) == 5
    latest = store.load()
    assert len(latest) == 3 and {t.status for t in latest} == {Status.OK}
    assert summarize(again.records).n_episodes == 3


async def test_agent_class_and_spec_must_agree_on_privilege(tmp_path: Path) -> None:
    class Liar(OracleAgent):
        @property
        def spec(self):  # type: ignore[no-untyped-def]
            return super().spec.model_copy(update={"privileged": False})

    env = ArithEnv()
    with pytest.raises(ConfigError, match="privileged=True but its spec says False"):
        await rollout(env, AgentClass(Liar), env.tasks(n=1), out_dir=tmp_path)


async def test_resume_keeps_a_last_record_that_lacks_only_its_newline(tmp_path: Path) -> None:
    env = ArithEnv()
    tasks = env.tasks(n=6)
    await rollout(env, ORACLE, tasks, out_dir=tmp_path)
    path = tmp_path / "trajectories.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:4]).removesuffix(b"\n"))  # 4 records, the last unended
    r = await rollout(env, ORACLE, tasks, out_dir=tmp_path, resume=True)
    assert r.skipped_episodes == 4 and r.new_episodes == 2
    assert any("newline" in n for n in r.notes)
    records = TrajectoryStore(path).load(every_record=True)
    assert len(records) == 6 and len({t.episode_id for t in records}) == 6


async def test_a_run_directory_held_by_another_writer_is_refused(tmp_path: Path) -> None:
    import os

    from envlab.core import StoreError
    from envlab.runs import RunLock

    env = ArithEnv()
    tasks = env.tasks(n=2)
    await rollout(env, NOOP, tasks, out_dir=tmp_path)
    before = (tmp_path / "trajectories.jsonl").read_bytes()
    with RunLock(tmp_path), pytest.raises(StoreError, match=rf"pid {os.getpid()}"):
        await rollout(env, NOOP, tasks, out_dir=tmp_path, resume=True)
    assert (tmp_path / "trajectories.jsonl").read_bytes() == before
    r = await rollout(env, NOOP, tasks, out_dir=tmp_path, resume=True)
    assert r.skipped_episodes == 2, "the lock is released when a run ends"


async def test_a_run_freezes_the_heap_while_it_runs_and_gives_it_back(tmp_path: Path) -> None:
    """What exists before the episodes is exempt from the collector's full passes during the
    run (their cost grows with the heap: torch, tokenizers); nested runs share one freeze, and
    everything is given back when the last ends, also when it fails."""
    import gc

    from envlab.core import Action, Observation
    from envlab.rollout.driver import frozen_heap

    seen: list[int] = []

    class Watching(OracleAgent):
        async def act(self, observation: Observation) -> Action:
            seen.append(gc.get_freeze_count())
            return await super().act(observation)

    assert gc.get_freeze_count() == 0
    await rollout(ArithEnv(), AgentClass(Watching), ArithEnv().tasks(n=2), out_dir=tmp_path / "a")
    assert seen and all(n > 0 for n in seen) and gc.get_freeze_count() == 0
    from envlab.rollout import driver

    with frozen_heap():
        assert gc.get_freeze_count() > 0 and driver._freezes == 1
        with frozen_heap():
            assert driver._freezes == 2  # one freeze shared, not a second
        assert gc.get_freeze_count() > 0 and driver._freezes == 1  # still frozen for the outer
    assert gc.get_freeze_count() == 0 and driver._freezes == 0
    with pytest.raises(RuntimeError, match="boom"), frozen_heap():
        raise RuntimeError("boom")
    assert gc.get_freeze_count() == 0


async def test_a_perturbed_run_plays_its_clean_runs_episode_seeds(tmp_path: Path) -> None:
    """Clean and perturbed runs of the same tasks pair episode for episode: same ids and
    seeds (the wrapped spec's seed_hash is its inner spec's), different content hashes."""
    from envlab.envs.calc import CalcEnv
    from envlab.envs.perturb import perturb

    clean = CalcEnv()
    noisy = perturb(clean, "transient=0.5")
    assert noisy.content_hash() != clean.content_hash()
    runs = []
    for name, spec in (("clean", clean), ("noisy", noisy)):
        await rollout(spec, ORACLE, spec.tasks(n=4), out_dir=tmp_path / name, samples=2)
        trajs = TrajectoryStore(tmp_path / name / "trajectories.jsonl").load()
        runs.append(sorted((t.episode_id, t.seed) for t in trajs))
    assert runs[0] == runs[1] and len(runs[0]) == 8
