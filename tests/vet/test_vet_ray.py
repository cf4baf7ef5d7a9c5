"""``envlab vet`` on Ray (``VetConfig(backend="ray")``, ``--backend ray``) against the local
backend, on a real local Ray instance (num_cpus=2, one for the module): the same verdicts, check
statuses, rewards and statuses per episode id, for Python environments and for a task folder in
both runtimes (the host filesystem; an image built from its Dockerfile). A Ray worker SIGKILLed
mid-vet (from the test, found by its process title) costs nothing: every probe episode is
recorded once and the verdicts are those of an undisturbed run."""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envlab.core import Trajectory
from envlab.envs import load_env
from envlab.envs.taskfolder.spec import TerminalEnv
from envlab.rollout import PlannedEpisode
from envlab.vet.runner import VetConfig, vet_environment
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host
from tests.sandbox.conftest import requires_bwrap

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

# the session's image fixtures: a private ENVLAB_CACHE_DIR and the tiny base built from the
# host's own programs (no network, about a second); the examples' real bases (ubuntu:24.04,
# python:3.11-slim) are built per session cache by mmdebstrap from the network, minutes each:
# tests/envs/taskfolder/test_examples_image.py runs them, not this file
image_cache = image_support.image_cache
tiny_rootfs = image_support.tiny_rootfs
tiny_base = image_support.tiny_base

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
SMALL = {"tasks": 2, "oracle_runs": 1, "samples": 2}
WORKER = "ray::EpisodeWorker"
"""The process title of an ``EpisodeWorker`` actor (``ray::EpisodeWorker.run`` mid-call)."""


@pytest.fixture(scope="module", autouse=True)
def ray_instance(image_cache: Path) -> Iterator[None]:
    """One local Ray instance for the module, started after ``ENVLAB_CACHE_DIR`` is set (its
    workers inherit it: the tiny base and the build caches are the driver's). Nothing of this
    module travels to the workers (a class pickled by value would not hash as its source)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


# --- what is compared ------------------------------------------------------------------------


def vet_outcome(out: Path) -> dict[str, Any]:
    """What vet concluded: each task's verdict and each check's status, the environment's
    checks, and the counts."""
    v = json.loads((out / "vet.json").read_text())
    return {
        "tasks": {
            t["task_id"]: (t["verdict"], {c["name"]: c["status"] for c in t["checks"]})
            for t in v["tasks"]
        },
        "env_checks": {c["name"]: c["status"] for c in v["env_checks"]},
        "counts": (v["verdict_counts"], v["quality_score"], v["clean"]),
        "episodes": (v["episodes"], v["infra_errors"]),
        "identity": (v["env_id"], v["env_hash"], v["settings"]),
    }


def records(out: Path) -> list[dict[str, Any]]:
    """Every line of ``trajectories.jsonl`` as written (the store's reader keeps the last
    record of an id: a duplicate would not show there)."""
    lines = (out / "trajectories.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def probe_outcomes(out: Path) -> dict[str, tuple[Any, ...]]:
    """episode_id -> (task, probe, status, reward), asserting each id was recorded once."""
    recs = records(out)
    ids = [r["episode_id"] for r in recs]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    return {
        r["episode_id"]: (r["task_id"], r["info"]["probe"], r["status"], r["reward"]) for r in recs
    }


def assert_same_vet(local: Path, remote: Path) -> dict[str, tuple[Any, ...]]:
    assert vet_outcome(remote) == vet_outcome(local)
    ours = probe_outcomes(remote)
    assert ours == probe_outcomes(local)
    assert len(ours) == vet_outcome(remote)["episodes"][0]
    return ours


async def vet_both(
    spec_of: Callable[[], Any], tmp_path: Path, agent: Any = None
) -> dict[str, tuple[Any, ...]]:
    """Vet a fresh spec locally and on Ray with the same small settings; both agree."""
    for backend in ("local", "ray"):
        await vet_environment(
            spec_of(), out_dir=tmp_path / backend, agent=agent,
            config=VetConfig(**SMALL, backend=backend),
        )  # fmt: skip
    return assert_same_vet(tmp_path / "local", tmp_path / "ray")


# --- Python environments ---------------------------------------------------------------------


@pytest.mark.parametrize("env_name", ["arith", "calc", "triage"])
async def test_python_envs_are_vetted_alike_on_ray(tmp_path: Path, env_name: str) -> None:
    ours = await vet_both(lambda: load_env(env_name), tmp_path)
    assert len(vet_outcome(tmp_path / "ray")["tasks"]) == 2
    # not a vacuous match: the probes scored, on Ray as locally (triage's oracle may score
    # its declared 0.25 on a task by design)
    assert max(o[3] for o in ours.values() if o[1] == "oracle") == 1.0
    assert {o[2] for o in ours.values()} == {"ok"}


async def test_the_trainability_agent_is_vetted_alike_on_ray(tmp_path: Path) -> None:
    """With an agent (the random one, seeded per episode): its samples too."""
    from envlab.agents import load_agent

    agent = load_agent("random")
    try:
        ours = await vet_both(lambda: load_env("arith"), tmp_path, agent)
    finally:
        await agent.aclose()
    assert len([o for o in ours.values() if o[1] == "agent"]) == 2 * 2


# --- task folders, in both runtimes ----------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_hello(tiny_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``examples/tasks/hello-file`` on the tiny base: an image task built without network."""
    task = tmp_path_factory.mktemp("image-tasks") / "hello-tiny"
    shutil.copytree(EXAMPLES / "hello-file", task)
    (task / "environment" / "Dockerfile").write_text(f"FROM {tiny_base}\nWORKDIR /app\n")
    return task


@pytest.fixture
def images_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    # vet reads a task folder's workspace, environment and verifier mode in the mode that
    # ENVLAB_IMAGES names, not the spec's ``images`` (src/envlab/vet/folders.py:106)
    monkeypatch.setenv("ENVLAB_IMAGES", "auto")


@requires_bwrap
async def test_a_task_folder_on_the_host_is_vetted_alike_on_ray(tmp_path: Path) -> None:
    path = EXAMPLES / "hello-file"
    await vet_both(lambda: TerminalEnv(path, sandbox="bwrap", images="off"), tmp_path)
    assert vet_outcome(tmp_path / "ray")["tasks"]["hello-file"][0] == "ok"


@needs_image_host
async def test_a_task_folder_in_an_image_is_vetted_alike_on_ray(
    tmp_path: Path, tiny_hello: Path, images_auto: None
) -> None:
    from envlab.envs.taskfolder import load_task_folder
    from envlab.sandbox.tasks.runtime import prepare_runtime

    runtime = await prepare_runtime(load_task_folder(tiny_hello), images="auto")
    assert "mode: image" in runtime.notes  # the episodes below run in the built image
    await vet_both(lambda: TerminalEnv(tiny_hello, images="auto"), tmp_path)
    assert vet_outcome(tmp_path / "ray")["tasks"]["hello-tiny"][0] == "ok"


# --- the command line ------------------------------------------------------------------------


def _vet_cli(*args: str) -> dict[str, Any]:
    from typer.testing import CliRunner

    from envlab.cli.main import app

    small = ["--agent", "none", "-n", "2", "--oracle-runs", "1", "-k", "2", "-c", "2", "--json"]
    res = CliRunner().invoke(app, ["vet", *args, *small])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


@pytest.mark.parametrize(
    "target",
    ["calc", pytest.param(str(EXAMPLES / "hello-file"), marks=requires_bwrap, id="hello-file")],
)
def test_vet_cli_backend_ray(tmp_path: Path, target: str) -> None:
    local = _vet_cli(target, "-o", str(tmp_path / "local"))
    remote = _vet_cli(target, "-o", str(tmp_path / "ray"), "--backend", "ray")
    assert remote["tasks"] and [t["verdict"] for t in remote["tasks"]] == [
        t["verdict"] for t in local["tasks"]
    ]
    assert_same_vet(tmp_path / "local", tmp_path / "ray")


USER_ENV = """
from envlab.envs.arith import ArithEnv


class UserArith(ArithEnv):
    \"\"\"A user's environment in a file of their own (``envlab vet FILE.py:Class``).\"\"\"

    name = "user-arith"
"""

FILE_ENVS = (
    "src/envlab/core/registry.py:122-129 imports FILE.py under the module name FILE and puts "
    "its folder on the driver's sys.path only; the spec pickles by reference to that module, "
    "which no Ray worker can import (ray_worker.py:48 pickle.loads: ModuleNotFoundError), so "
    "every FILE.py:Class environment stops --backend ray with a WorkerSetupError, even on one "
    "machine with the file at the same path"
)


@pytest.mark.xfail(strict=True, reason=FILE_ENVS)
def test_vet_cli_backend_ray_of_an_environment_in_a_file(tmp_path: Path) -> None:
    path = tmp_path / "vet_ray_user_env.py"  # a module name no other test imports
    path.write_text(USER_ENV)
    target = f"{path}:UserArith"
    _vet_cli(target, "-o", str(tmp_path / "local"))
    _vet_cli(target, "-o", str(tmp_path / "ray"), "--backend", "ray")
    assert_same_vet(tmp_path / "local", tmp_path / "ray")


# --- a worker killed mid-vet -----------------------------------------------------------------


def _our_workers() -> list[Any]:
    """This process's ``EpisodeWorker`` actors (descendants of this process: other test
    processes' Ray instances have workers of the same title)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            argv = p.cmdline()
        except psutil.Error:
            continue
        if argv and argv[0].startswith(WORKER):
            found.append(p)
    return found


def until(check: Callable[[], bool], tries: int = 200) -> bool:
    """``check()`` became true within a bounded number of polls (a guard, not a speed bound)."""
    done = threading.Event()
    for _ in range(tries):
        if check():
            return True
        done.wait(0.05)
    return check()


class KillsAWorker:
    """A ``VetObserver`` that SIGKILLs one of this run's Ray workers, once, when the ``k``-th
    probe episode has been recorded (a worker mid-call if one is, else an idle one: its next
    episode then finds it dead)."""

    def __init__(self, k: int) -> None:
        self.k, self.seen, self.killed = k, 0, None

    def planned(self, n: int) -> None:
        pass

    def finished(self, episode: PlannedEpisode, trajectory: Trajectory) -> None:
        self.seen += 1
        if self.seen != self.k or self.killed is not None:
            return
        workers = _our_workers()
        assert workers, "no EpisodeWorker process of this run to kill"
        busy = [w for w in workers if w.cmdline()[0].startswith(WORKER + ".run")]
        victim = (busy or workers)[0]
        os.kill(victim.pid, signal.SIGKILL)
        self.killed = victim.pid


def _lost(out: Path) -> list[dict[str, Any]]:
    return [r for r in records(out) if r["info"].get("ray_workers_lost")]


async def test_a_worker_killed_mid_vet_changes_no_verdict(tmp_path: Path) -> None:
    assert until(lambda: not _our_workers())  # the other tests' actors are gone
    cfg = VetConfig(**SMALL, backend="ray")
    await vet_environment(load_env("calc"), out_dir=tmp_path / "calm", config=cfg)
    assert until(lambda: not _our_workers())
    killer = KillsAWorker(k=3)
    await vet_environment(load_env("calc"), out_dir=tmp_path / "killed", config=cfg,
                          observer=killer)  # fmt: skip
    assert killer.killed is not None
    assert killer.seen == vet_outcome(tmp_path / "killed")["episodes"][0]
    assert_same_vet(tmp_path / "calm", tmp_path / "killed")  # each probe once, same verdicts
    (lost,) = _lost(tmp_path / "killed")  # the one episode the kill cost was run again
    assert lost["attempts"] == 2 and lost["status"] == "ok"
    assert "Actor" in lost["info"]["ray_workers_lost"][0]
    others = [r for r in records(tmp_path / "killed") if r["episode_id"] != lost["episode_id"]]
    assert others and all(r["attempts"] == 1 for r in others)


SLOW_SOLVE = """#!/bin/bash
# long enough for the test to find it running (by this argument: vet's background probe
# sleeps too): the test kills its Ray worker meanwhile
sleep 3.25
printf 'Hello, world!\\n' > /app/hello.txt
"""


class KillsASandboxedEpisode(threading.Thread):
    """Watches this process's Ray workers; the first one found running ``sleep 3.25`` (the
    oracle's solve.sh inside its sandbox) is SIGKILLed, once. Bounded by ``stop``."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.killed: int | None = None
        self.sandboxed: list[int] = []

    def run(self) -> None:
        while self.killed is None and not self.stop.wait(0.01):
            for worker in _our_workers():
                try:
                    tree = worker.children(recursive=True)
                    sleeping = any(c.cmdline() == ["sleep", "3.25"] for c in tree)
                except psutil.Error:
                    continue
                if sleeping:
                    self.sandboxed = [c.pid for c in tree]
                    os.kill(worker.pid, signal.SIGKILL)
                    self.killed = worker.pid
                    return


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True


def _left_by(pid: int) -> list[tuple[str, str]]:
    """What the sandbox layer still holds of the (dead) process ``pid``: mounts, loop
    devices, cgroups, workspaces (``envlab gc``'s list, removing nothing)."""
    from envlab.sandbox.gc import collect

    return [
        (r.kind, r.path)
        for r in collect(dry_run=True, wait_s=60)
        if r.owner is not None and r.owner.startswith(f"o{pid}-") and r.kind != "owner"
    ]


@pytest.mark.parametrize(
    "mode",
    [
        pytest.param("host", marks=requires_bwrap),
        pytest.param("image", marks=[needs_image_host]),
    ],
)
async def test_a_worker_killed_in_a_sandbox_mid_vet_changes_no_verdict(
    tmp_path: Path, mode: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlab.sandbox.gc import collect

    task = tmp_path / "tasks" / "hello-slow"
    shutil.copytree(EXAMPLES / "hello-file", task)
    (task / "solution" / "solve.sh").write_text(SLOW_SOLVE)
    images = "auto" if mode == "image" else "off"
    if mode == "image":
        base = request.getfixturevalue("tiny_base")
        (task / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\n")
    monkeypatch.setenv("ENVLAB_IMAGES", images)
    cfg = VetConfig(**SMALL, backend="ray")
    assert until(lambda: not _our_workers())
    await vet_environment(TerminalEnv(task, images=images), out_dir=tmp_path / "calm", config=cfg)
    assert until(lambda: not _our_workers())
    killer = KillsASandboxedEpisode()
    killer.start()
    try:
        await vet_environment(
            TerminalEnv(task, images=images), out_dir=tmp_path / "killed", config=cfg
        )
    finally:
        killer.stop.set()
        killer.join(timeout=10)
    assert killer.killed is not None, "no worker was seen running the oracle's solve.sh"
    try:
        ours = assert_same_vet(tmp_path / "calm", tmp_path / "killed")
        assert vet_outcome(tmp_path / "killed")["tasks"]["hello-slow"][0] == "ok"
        (lost,) = _lost(tmp_path / "killed")
        assert lost["attempts"] == 2 and lost["status"] == "ok" and lost["reward"] == 1.0
        assert ours[lost["episode_id"]][1] == "oracle"
        # the killed episode's sandbox processes went with its worker (--die-with-parent) ...
        assert all(until(lambda pid=pid: _gone(pid)) for pid in killer.sandboxed)
        # ... and what it held on the host was swept by the fresh actor's first sandbox
        assert _left_by(killer.killed) == []
    finally:
        collect(wait_s=60)  # what any process's first bwrap sandbox does: nothing is left
