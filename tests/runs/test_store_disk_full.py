"""A full disk (a real small tmpfs, or a real file-size limit): a clear error, nothing lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlab.core import StoreError, Trajectory
from envlab.runs import TrajectoryStore
from tests.conftest import subprocess_env
from tests.runs.test_store import traj as store_traj


def traj(i: int, text: str = "") -> Trajectory:
    content = text or f"{i} " * 2000  # ~8 KB a line
    return store_traj(i, messages=[{"role": "assistant", "content": content}])


def _mount_tmpfs(where: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    where.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                       capture_output=True)  # fmt: skip
    return r.returncode == 0


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "128k"):
        pytest.skip("needs root and tmpfs mounts to make a small disk")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_disk_full_is_a_clear_error_and_keeps_every_earlier_line(small_disk: Path) -> None:
    p = small_disk / "trajectories.jsonl"
    written = 0
    with pytest.raises(StoreError) as err, TrajectoryStore(p) as store:
        for i in range(1000):
            store.append(traj(i))
            written += 1
    msg = str(err.value)
    assert "the disk is full" in msg and str(p) in msg and "--resume" in msg
    assert 5 < written < 1000
    assert p.read_bytes().endswith(b"\n"), "the partial line was cut off"
    assert [t.episode_id for t in TrajectoryStore(p).load()] == [f"e{i}" for i in range(written)]


def test_a_blob_that_does_not_fit_leaves_nothing_behind(small_disk: Path) -> None:
    p = small_disk / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        store.append(traj(0))
        before = p.read_bytes()
        with pytest.raises(StoreError, match=r"write a message blob .*the disk is full"):
            store.append(traj(1, "x" * 400_000))
    assert p.read_bytes() == before
    assert list((small_disk / "blobs").iterdir()) == [], "no partial blob, no temporary file"


async def test_a_run_on_a_full_disk_stops_cleanly_then_resumes(small_disk: Path) -> None:
    from envlab.agents.scripted import OracleAgent
    from envlab.core import AgentClass
    from envlab.envs.arith import ArithEnv
    from envlab.rollout import rollout

    env, oracle = ArithEnv(), AgentClass(OracleAgent)
    tasks = env.tasks(n=300)
    out = small_disk / "run"
    with pytest.raises(StoreError, match="the disk is full"):  # not an ExceptionGroup
        await rollout(env, oracle, tasks, out_dir=out, concurrency=4)
    kept = TrajectoryStore(out / "trajectories.jsonl").load()
    assert 0 < len(kept) < 300
    subprocess.run(["mount", "-o", "remount,size=4m", str(small_disk)], check=True)
    r = await rollout(env, oracle, tasks, out_dir=out, resume=True)
    assert r.skipped_episodes == len(kept) and r.new_episodes == 300 - len(kept)
    ids = [
        t.episode_id for t in TrajectoryStore(out / "trajectories.jsonl").load(every_record=True)
    ]
    assert len(ids) == 300 and len(set(ids)) == 300


_FSIZE_CHILD = """
import json, resource, signal, sys
from envlab.core import StoreError
from envlab.runs import TrajectoryStore
from tests.runs.test_store_disk_full import traj
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (60_000, 60_000))
n = 0
try:
    with TrajectoryStore(sys.argv[1]) as store:
        for i in range(1000):
            store.append(traj(i))
            n += 1
except StoreError as e:
    print(json.dumps({"written": n, "error": str(e)}))
"""


def test_a_file_size_limit_is_a_clear_error_and_keeps_every_earlier_line(tmp_path: Path) -> None:
    p = tmp_path / "trajectories.jsonl"
    r = subprocess.run([sys.executable, "-c", _FSIZE_CHILD, str(p)], env=subprocess_env(),
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "file size limit" in out["error"] and str(p) in out["error"]
    assert 0 < out["written"] < 1000 and p.stat().st_size <= 60_000
    assert p.read_bytes().endswith(b"\n")
    assert len(TrajectoryStore(p).load()) == out["written"]
