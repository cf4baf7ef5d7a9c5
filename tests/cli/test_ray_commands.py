"""``--backend ray`` on ``envlab arena`` (named environments), ``robustness``, ``task check`` and
``task run``, on a real local Ray instance (num_cpus=2, one for the module), against the local
backend: the same verdicts, rows, rewards and statuses per episode id, in process (``check``,
``run_samples``, ``measure_robustness``) and through the command line (typer's ``CliRunner``:
each command joins the module's Ray connection), for Python environments and for task folders
on the host and in an image built from their Dockerfile."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envlab.cli.main import app
from envlab.runs import TrajectoryStore
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import needs_image_host, write_task
from tests.sandbox.conftest import requires_bwrap

ray = pytest.importorskip("ray")

# the session's image fixtures: a private ENVLAB_CACHE_DIR and the tiny base built from the
# host's own programs (no network, about a second). The examples' own bases (ubuntu:24.04,
# python:3.11-slim) are built per session cache by mmdebstrap from the network, minutes each:
# tests/envs/taskfolder/test_examples_image.py runs those
image_cache = image_support.image_cache
tiny_rootfs = image_support.tiny_rootfs
tiny_base = image_support.tiny_base

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
BACKENDS = ("local", "ray")


@pytest.fixture(scope="module", autouse=True)
def ray_instance(image_cache: Path) -> Iterator[None]:
    """One local Ray instance for the module, started after ``ENVLAB_CACHE_DIR`` is set (its
    workers inherit it: the tiny base and the build caches are the driver's)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


# --- task folders: on the host, and in images ------------------------------------------------

TEST_STATE = (
    "if [ -f /opt/state/done ]; then echo 1 > /logs/verifier/reward.txt; "
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@pytest.fixture(scope="module")
def host_tasks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two examples and a broken task (the no-op scores 1), run on the host filesystem."""
    root = tmp_path_factory.mktemp("host-tasks")
    for name in ("hello-file", "log-errors"):
        shutil.copytree(EXAMPLES / name, root / name)
    write_task(root, "always-one", "FROM ubuntu:24.04\n", solve_sh="true\n")
    return root


@pytest.fixture(scope="module")
def image_tasks(tiny_base: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``hello-file`` on the tiny base, and a task whose tests read the agent's system state
    (its oracle fails graded ``separate``: ``task check`` runs it again graded ``shared``)."""
    root = tmp_path_factory.mktemp("image-tasks")
    shutil.copytree(EXAMPLES / "hello-file", root / "hello-tiny")
    (root / "hello-tiny" / "environment" / "Dockerfile").write_text(
        f"FROM {tiny_base}\nWORKDIR /app\n"
    )
    write_task(root, "needs-shared", f"FROM {tiny_base}\nWORKDIR /app\n",
               solve_sh="mkdir -p /opt/state && echo x > /opt/state/done\n",
               test_sh=TEST_STATE)  # fmt: skip
    return root


@pytest.fixture(params=["host", "image"])
def tasks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Path]:
    """``(mode, directory of task folders)``; ENVLAB_IMAGES as the mode needs (the CLI's
    default, read on the driver and sent to the workers in the spec's config)."""
    mode = request.param
    skip = requires_bwrap if mode == "host" else needs_image_host
    if skip.args[0]:
        pytest.skip(skip.kwargs["reason"])
    monkeypatch.setenv("ENVLAB_IMAGES", "off" if mode == "host" else "auto")
    return mode, request.getfixturevalue(f"{mode}_tasks")


def row_outcome(row: dict[str, Any]) -> dict[str, Any]:
    """An episode row without its wall-clock duration."""
    return {k: v for k, v in row.items() if k != "duration_s"}


def check_outcome(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**r, "oracle": [row_outcome(o) for o in r["oracle"]],
         "noop": [row_outcome(o) for o in r["noop"]]}
        for r in rows
    ]  # fmt: skip


def invoke(*args: str, code: int = 0) -> Any:
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == code, res.output
    return json.loads(res.stdout)


# --- task check ------------------------------------------------------------------------------


async def test_task_check_is_the_same_on_ray(tasks: tuple[str, Path]) -> None:
    from envlab.cli.task_runs import check

    mode, root = tasks
    rows = {
        b: [r.model_dump(mode="json") for r in await check(root, 2, 1, 2, backend=b)]
        for b in BACKENDS
    }
    assert check_outcome(rows["ray"]) == check_outcome(rows["local"])
    by = {r["task_id"]: r for r in rows["ray"]}
    if mode == "host":
        assert by["hello-file"]["ok"] and by["log-errors"]["ok"], by
        assert not by["always-one"]["ok"] and "noop sample 0" in by["always-one"]["problems"][0]
    else:
        assert by["hello-tiny"]["ok"] and "mode: image" in by["hello-tiny"]["notes"]
        # the second plan (graded shared) ran on the same backend and found what it does locally
        assert any("passes graded shared" in p for p in by["needs-shared"]["problems"])
    assert {o["reward"] for r in rows["ray"] for o in r["oracle"] if r["ok"]} == {1.0}


def test_task_check_cli_backend_ray(tasks: tuple[str, Path]) -> None:
    _, root = tasks
    args = ["task", "check", str(root), "--runs", "1", "-c", "2"]
    local = invoke(*args, code=1)  # a broken task in each directory: exit 1
    remote = invoke(*args, "--backend", "ray", code=1)
    assert check_outcome(remote) == check_outcome(local)
    assert sum(r["ok"] for r in remote) == len(remote) - 1


# --- task run --------------------------------------------------------------------------------


async def test_task_run_is_the_same_on_ray(tasks: tuple[str, Path]) -> None:
    from envlab.cli.options import open_agent, open_env
    from envlab.cli.task_runs import run_samples

    _, root = tasks
    spec = open_env(str(root), {}, None)
    oracle, noop = open_agent("oracle", {}), open_agent("noop", {})
    try:
        rows = {
            b: await run_samples(
                spec, [(oracle, 2), (noop, 1)], list(spec.tasks()), concurrency=2, backend=b
            )
            for b in BACKENDS
        }
    finally:
        await oracle.aclose()
        await noop.aclose()
    dumped = {b: [[row_outcome(r.model_dump(mode="json")) for r in run] for run in rows[b]]
              for b in BACKENDS}  # fmt: skip
    assert dumped["ray"] == dumped["local"]
    assert len(dumped["ray"][0]) == 2 * len(spec.tasks())
    assert {r["status"] for run in dumped["ray"] for r in run} == {"ok"}


def test_task_run_cli_backend_ray(tasks: tuple[str, Path], tmp_path: Path) -> None:
    _, root = tasks
    script = tmp_path / "solve.sh"  # the shell agent: right on hello-file only
    script.write_text("printf 'Hello, world!\\n' > /app/hello.txt\n")
    args = ["task", "run", str(root), "--agent", f"shell:{script}", "-k", "2", "-c", "2"]
    local = invoke(*args)
    remote = invoke(*args, "--backend", "ray")
    assert [row_outcome(r) for r in remote] == [row_outcome(r) for r in local]
    rewards = {(r["task_id"], r["reward"]) for r in remote}
    assert {r for _, r in rewards} == {0.0, 1.0}, rewards


# --- robustness ------------------------------------------------------------------------------


def faults_per_episode(run_dir: Path) -> dict[str, tuple[Any, ...]]:
    """episode_id -> (task, status, reward, the faults injected in each step), asserting each
    id was recorded once."""
    trajs = TrajectoryStore(run_dir / "trajectories.jsonl").load(every_record=True)
    ids = [t.episode_id for t in trajs]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    return {
        t.episode_id: (
            t.task_id, t.status.value, t.reward,
            json.dumps([s.info.get("faults", []) for s in t.steps], sort_keys=True),
        )
        for t in trajs
    }  # fmt: skip


def robustness_outcome(out: Path) -> dict[str, Any]:
    """``robustness.json`` without its run directories; the episodes of each run."""
    r = json.loads((out / "robustness.json").read_text())
    for side in [r["clean"], *(p["run"] for p in r["perturbations"])]:
        assert Path(side.pop("run_dir")).parent == out
    names = ["clean", *(p["name"] for p in r["perturbations"])]
    return {"json": r, "episodes": {n: faults_per_episode(out / n) for n in names}}


CALC = ("calc", "transient=0.5,timeout=1", 6, 2)
"""The oracle retries transient errors (no drop) and loses to timeouts (a drop)."""


@pytest.mark.parametrize("where", ["calc", "task-folders"])
async def test_robustness_is_the_same_on_ray(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from envlab.cli.options import open_agent, open_env
    from envlab.cli.robustness_cmd import measure_robustness, parse_each

    if where == "calc":
        env, text, n, samples = CALC
    else:
        if requires_bwrap.args[0]:
            pytest.skip(requires_bwrap.kwargs["reason"])
        env, text, n, samples = str(request.getfixturevalue("host_tasks")), "timeout=1", None, 2
    spec = open_env(env, {})
    task_set = spec.tasks(n=n, split="test")
    agent = open_agent("oracle", {})
    try:
        for b in BACKENDS:
            await measure_robustness(
                spec, agent, task_set, parse_each(text), tmp_path / b, split="test",
                samples=samples, concurrency=2, backend=b,
            )  # fmt: skip
    finally:
        await agent.aclose()
    local, remote = robustness_outcome(tmp_path / "local"), robustness_outcome(tmp_path / "ray")
    assert remote == local
    assert sum(p["run"]["faults"] for p in remote["json"]["perturbations"]) > 0
    if where == "calc":
        drops = {p["name"]: p["drop"] for p in remote["json"]["perturbations"]}
        assert drops["transient"] == 0 and drops["timeout"] > 0, drops


def test_robustness_cli_backend_ray(tmp_path: Path) -> None:
    env, text, n, samples = CALC
    args = ["robustness", env, "-a", "oracle", "-p", text, "-n", str(n), "-k", str(samples),
            "-c", "2"]  # fmt: skip
    invoke(*args, "-o", str(tmp_path / "local"))
    out = invoke(*args, "-o", str(tmp_path / "ray"), "--backend", "ray")
    assert robustness_outcome(tmp_path / "ray") == robustness_outcome(tmp_path / "local")
    assert out["clean"]["mean"] == 1.0 and out["clean"]["n_scored"] == n * samples


# --- arena -----------------------------------------------------------------------------------


def vet_outcome(out: Path) -> dict[str, Any]:
    v = json.loads((out / "vet.json").read_text())
    return {
        "tasks": {
            t["task_id"]: (t["verdict"], {c["name"]: c["status"] for c in t["checks"]})
            for t in v["tasks"]
        },
        "env_checks": {c["name"]: c["status"] for c in v["env_checks"]},
        "counts": (v["verdict_counts"], v["quality_score"], v["episodes"], v["infra_errors"]),
    }


def probe_outcomes(out: Path) -> dict[str, tuple[Any, ...]]:
    recs = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines() if x]
    ids = [r["episode_id"] for r in recs]
    assert len(ids) == len(set(ids)), "an episode was recorded twice"
    return {r["episode_id"]: (r["task_id"], r["info"]["probe"], r["status"], r["reward"])
            for r in recs}  # fmt: skip


def test_arena_of_named_envs_cli_backend_ray(tasks: tuple[str, Path], tmp_path: Path) -> None:
    mode, root = tasks
    folder = root / ("hello-file" if mode == "host" else "hello-tiny")
    envs = ["arith", "calc", "triage", str(folder)] if mode == "host" else ["arith", str(folder)]
    args = ["arena", *envs, "-a", "none", "-n", "2", "--oracle-runs", "1", "-k", "2", "-c", "2"]
    local = invoke(*args, "-o", str(tmp_path / "local"))
    remote = invoke(*args, "-o", str(tmp_path / "ray"), "--backend", "ray")
    assert remote == local and len(remote) == len(envs)
    assert {r["env_id"] for r in remote if r["verdict_counts"]["ok"] == r["tasks"]} == {
        r["env_id"] for r in remote
    }
    dirs = sorted(p.name for p in (tmp_path / "ray").iterdir() if p.is_dir())
    assert len(dirs) == len(envs)
    for d in dirs:
        assert vet_outcome(tmp_path / "ray" / d) == vet_outcome(tmp_path / "local" / d)
        assert probe_outcomes(tmp_path / "ray" / d) == probe_outcomes(tmp_path / "local" / d)
