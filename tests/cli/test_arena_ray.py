"""``envlab arena --catalog ... --backend ray`` against the local backend, on a real local Ray
instance (num_cpus=2, one for the module), over envlab's own catalogue: the same rows, and per
environment the same statuses, rewards and probes per episode id. A Ray worker SIGKILLed while
it vets an environment (found by its process title) costs nothing: the environment is vetted
again elsewhere, every episode is written once, the verdicts are those of an undisturbed run,
and no vet process is left behind. Environments start the costliest first (no Ray needed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from envlab.adapters.catalog import Found
from envlab.cli.arena_catalog import (
    ARENA_FILE,
    Arena,
    ArenaEntry,
    by_cost,
    costs_of,
    process_vet,
    run_catalog,
)
from envlab.cli.arena_cmd import CatalogRun
from envlab.core import ConfigError
from envlab.runs import TrajectoryStore
from envlab.vet.runner import VetConfig

T = TypeVar("T")
RUN = CatalogRun("none", VetConfig(oracle_runs=1, samples=2, group_size=2, concurrency=1,
                                   tasks=2), jobs=2, resume=False, env_timeout=120)  # fmt: skip
ARGS = RUN.vet_args()
if sys.platform != "linux":  # /proc, and the vet process's death signal
    pytestmark = pytest.mark.skip("Linux only")


@pytest.fixture(scope="module")
def ray_instance() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray import cloudpickle

    # this module's task (a worker that kills itself) travels by value: workers need not
    # import the tests package
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def local_arena(tmp_path_factory: pytest.TempPathFactory) -> Arena:
    """The undisturbed reference: the catalogue vetted by processes of this machine."""
    out = tmp_path_factory.mktemp("local")
    return arena_of(out, process_vet(ARGS, RUN.env_timeout))


def arena_of(out: Path, vet: object, **kw: Any) -> Arena:
    return asyncio.run(run_catalog(["envlab"], out, vet, settings={}, jobs=RUN.jobs,
                                   resume=False, **kw))  # fmt: skip


def rows(arena: Arena) -> dict[str, tuple[Any, ...]]:
    names = [e.name for e in arena.entries]
    assert len(names) == len(set(names)), "an environment has two rows"
    return {e.name: (e.status, e.verdict_counts, e.tasks, e.episodes, e.env_hash, e.findings)
            for e in arena.entries}  # fmt: skip


def episodes(entry: ArenaEntry) -> dict[str, tuple[Any, ...]]:
    """Episode id -> (status, reward, probe) of one environment's vetting, each id once."""
    assert entry.vet_dir is not None, entry
    trajs = TrajectoryStore(Path(entry.vet_dir) / "trajectories.jsonl").load()
    ids = [t.episode_id for t in trajs]
    assert ids and len(ids) == len(set(ids)), f"{entry.name}: an episode was written twice"
    return {t.episode_id: (t.status.value, t.reward, t.info.get("probe")) for t in trajs}


def same_episodes(a: Arena, b: Arena) -> None:
    other = {e.name: e for e in b.entries}
    for e in a.entries:
        if e.status == "vetted":
            assert episodes(e) == episodes(other[e.name]), e.name


def test_ray_vets_the_catalogue_as_the_local_backend_does(
    ray_instance: Any, local_arena: Arena, tmp_path: Path
) -> None:
    from envlab.cli.arena_ray import SCRATCH_PREFIX, RayVet

    arena = arena_of(tmp_path, RayVet(ARGS, RUN.env_timeout, cpus=1))
    assert rows(arena) == rows(local_arena)
    assert {e.status for e in arena.entries} >= {"vetted"}
    assert all(e.workers_lost == [] for e in arena.entries)
    same_episodes(arena, local_arena)
    for e in arena.entries:  # the node's workspace copies and lock stayed there
        if e.vet_dir:
            assert not {"snapshots", "lock"} & {p.name for p in Path(e.vet_dir).iterdir()}
    assert not _vet_processes(SCRATCH_PREFIX)


async def test_a_killed_worker_s_environment_is_vetted_again_elsewhere(
    ray_instance: Any, local_arena: Arena, tmp_path: Path
) -> None:
    from envlab.cli.arena_ray import SCRATCH_PREFIX, RayVet

    vet = RayVet(ARGS, RUN.env_timeout, cpus=1)
    running = asyncio.create_task(
        run_catalog(["envlab"], tmp_path, vet, settings={}, jobs=RUN.jobs, resume=False)
    )
    worker, child, name = await _until(_a_worker_vetting)
    os.kill(worker, signal.SIGKILL)  # mid-vet: its vet process is running
    arena = await running
    await _until(lambda: not _alive(child) or None)  # the vet process died with its worker
    assert rows(arena) == rows(local_arena)  # every environment once, the same verdicts
    same_episodes(arena, local_arena)  # every episode once, as undisturbed
    lost = {e.name: e.workers_lost for e in arena.entries if e.workers_lost}
    assert list(lost) == [name] and len(lost[name]) == 1, lost
    assert not _vet_processes(SCRATCH_PREFIX)  # no orphan vets on


def test_the_vet_s_own_outcome_and_a_worker_lost_on_every_try(
    ray_instance: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    """A ``RayTaskError`` carries the vetting's outcome (timed out, failed), as locally; a
    worker that dies on every try exhausts the budget: ``vet_failed`` naming the losses."""
    from envlab.cli.arena_ray import RayVet

    catalogue = [Found(name="calc", source="envlab", loaded=True),
                 Found(name="no-such-env", source="envlab", loaded=True)]  # fmt: skip
    monkeypatch.setattr("envlab.cli.arena_catalog.find", lambda sources: catalogue)
    fast = arena_of(tmp_path / "fast", RayVet(ARGS, 0.05, cpus=1))  # less than a start-up
    assert {e.status for e in fast.entries} == {"timed_out"}
    assert all("--env-timeout 0.05s" in e.reason for e in fast.entries)
    failed = {e.name: e for e in arena_of(tmp_path / "fail", RayVet(ARGS, 60, cpus=1)).entries}
    assert failed["no-such-env"].status == "vet_failed"
    assert "envlab vet exited with" in failed["no-such-env"].reason
    assert failed["calc"].status == "vetted" and failed["calc"].workers_lost == []

    dies = RayVet(ARGS, 60, cpus=1, lost_budget=1)
    dies._task = ray_instance.remote(_kills_its_worker).options(max_retries=0)
    monkeypatch.setattr("envlab.cli.arena_catalog.find", lambda sources: catalogue[:1])
    [row] = arena_of(tmp_path / "dies", dies).entries
    assert row.status == "vet_failed" and "died on each of its 2 tries" in row.reason
    assert "--resume tries it again" in row.reason and len(row.workers_lost) == 2


def _kills_its_worker(name: str, vet_args: list[str], timeout_s: float) -> bytes:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def test_the_command_vets_on_ray_in_the_measured_order(
    ray_instance: Any, local_arena: Arena, tmp_path: Path
) -> None:
    """``--backend ray`` joins the connection this process has; ``--costs`` an earlier arena."""
    from typer.testing import CliRunner

    from envlab.cli.main import app

    earlier = tmp_path / "earlier.json"
    earlier.write_text(local_arena.model_dump_json())
    out = tmp_path / "ray"
    res = CliRunner().invoke(app, [
        "arena", "--catalog", "envlab", "--tasks", "2", "--samples", "2", "--oracle-runs", "1",
        "--group-size", "2", "-c", "1", "--backend", "ray", "--costs", str(earlier),
        "--out", str(out), "--json",
    ])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert rows(Arena.model_validate_json((out / ARENA_FILE).read_bytes())) == rows(local_arena)
    assert ray_instance.is_initialized()  # the module's connection, not one of its own


def test_environments_start_the_costliest_first(tmp_path: Path, monkeypatch: Any) -> None:
    found = [Found(name=n, source="t", loaded=True, seconds=s)
             for n, s in [("a", 0.1), ("b", 0.4), ("c", 0.2), ("d", 0.2), ("e", 0.0)]]  # fmt: skip
    assert [f.name for f in by_cost(found, {})] == ["b", "c", "d", "a", "e"]  # ties by name
    # measured: a 9 s (90 x its load time), c 1 s (5 x): the others' load times x 47.5
    assert [f.name for f in by_cost(found, {"a": 9.0, "c": 1.0})] == ["b", "d", "a", "c", "e"]

    earlier = Arena(sources=["t"], settings={"env_timeout_s": 300.0}, started_at=0, entries=[
        ArenaEntry(name="a", source="t", status="vetted", elapsed_s=2.5),
        ArenaEntry(name="b", source="t", status="timed_out", elapsed_s=300.4),
        ArenaEntry(name="c", source="t", status="timed_out"),
        ArenaEntry(name="d", source="t", status="not_loaded"),
        ArenaEntry(name="e", source="t", status="vet_failed", elapsed_s=1.0),
    ])  # fmt: skip
    (tmp_path / "earlier.json").write_text(earlier.model_dump_json())
    assert costs_of(tmp_path / "earlier.json") == {"a": 2.5, "b": 300.4, "c": 300.0}
    with pytest.raises(ConfigError, match=r"--costs .*no such file"):
        costs_of(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text(json.dumps({"entries": 3}))
    with pytest.raises(ConfigError, match=r"is not an arena\.json"):
        costs_of(tmp_path / "bad.json")

    started: list[str] = []

    async def records(f: Found, where: Path) -> Any:
        started.append(f.name)
        raise RuntimeError("not vetted here")

    monkeypatch.setattr("envlab.cli.arena_catalog.find", lambda sources: found)
    arena = asyncio.run(run_catalog(["t"], tmp_path / "a", records, settings={}, jobs=1,
                                    resume=False, costs={"e": 50.0}))  # fmt: skip
    assert started == ["e", "b", "c", "d", "a"]
    assert all(e.status == "vet_failed" and e.elapsed_s >= 0 for e in arena.entries)


def _a_worker_vetting() -> tuple[int, int, str] | None:
    """(worker pid, its vet process's pid, the environment) of a Ray worker running a vet
    task whose vet process has started (``ray::vet_on_node``, the task's process title)."""
    workers = {pid for pid, argv in _processes() if argv[0].startswith("ray::vet_on_node")}
    for pid, argv in _processes():
        if _parent(pid) in workers and argv[1:4] == ["-m", "envlab", "vet"]:  # exec'd
            return _parent(pid), pid, argv[argv.index("vet") + 1]
    return None


def _vet_processes(marker: str) -> list[int]:
    return [pid for pid, argv in _processes() if any(marker in a for a in argv) and _alive(pid)]


def _processes() -> Iterator[tuple[int, list[str]]]:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            raw = cmdline.read_bytes()
        except OSError:
            continue
        argv = [a.decode(errors="replace") for a in raw.rstrip(b"\0").split(b"\0")]
        if argv and argv[0]:
            yield int(cmdline.parent.name), argv


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in "ZX"
    except (OSError, IndexError):
        return False


async def _until(check: Callable[[], T | None]) -> T:
    for _ in range(600):  # a guard for processes to start or exit, not a speed bound
        if (got := check()) is not None and got is not False:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"{check.__name__} never held")
