"""Stale clean-up: a real envlab process SIGKILLed while it holds a sandbox (workspace, mounted
filesystem, loop device, cgroup) leaves nothing behind after ``envlab gc`` or the next
process's first sandbox; a live process's sandboxes are never touched, whatever its pid."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envlab.sandbox.gc import collect
from envlab.sandbox.limits import _cgroup_parent
from envlab.sandbox.owner import lock_root
from tests.sandbox.conftest import requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]

HOLD = """
import asyncio, json, sys
from envlab.sandbox import BubblewrapSandbox, Limits, MiB, scratch_dir

async def main():
    limits = Limits(storage_bytes=32 * MiB, memory_bytes=256 * MiB, timeout_s=600)
    box = await BubblewrapSandbox.create(limits=limits, name="held")
    await box.exec("head -c 4000000 /dev/urandom > /app/work.bin")
    cg = str(box._cgroup.path) if box._cgroup else None
    scratch = scratch_dir("verify-")
    (scratch / "tests").mkdir()
    print(json.dumps({"root": str(box.storage.root), "fs": str(box.storage.fs), "cgroup": cg,
                      "kind": box.storage_kind, "uid": box.uid, "scratch": str(scratch)}),
          flush=True)
    await box.exec("sleep 600")

asyncio.run(main())
"""

ONE_SANDBOX = """
import asyncio
from envlab.sandbox import BubblewrapSandbox

async def main():
    async with await BubblewrapSandbox.create() as box:
        await box.exec("true")

asyncio.run(main())
"""


def mounts() -> set[str]:
    with open("/proc/self/mountinfo") as f:
        return {line.split()[4] for line in f}


def processes_of(uid: int) -> list[int]:
    from envlab.sandbox.uids import processes_of as live

    return live(uid)


def hold_and_kill(env: dict[str, str]) -> dict[str, str]:
    """Start an envlab process that holds a sandbox, then SIGKILL it mid-command."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        time.sleep(0.2)  # the sleep command is running
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return info


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    state = tmp_path / "state"
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(state))
    return {**os.environ, "ENVLAB_SANDBOX_DIR": str(state)}


def test_gc_removes_everything_of_a_killed_process(env: dict[str, str]) -> None:
    info = hold_and_kill(env)
    root, fs, cgroup = Path(info["root"]), info["fs"], info["cgroup"]
    oid = root.parent.name
    assert root.is_dir() and fs in mounts() and info["kind"] == "ext4"
    assert (lock_root() / "owners" / f"{oid}.lock").exists()
    if _cgroup_parent() is not None:
        assert cgroup is not None and Path(cgroup).is_dir()
    listed = collect(dry_run=True)
    assert {r.kind for r in listed if r.owner == oid} >= {"mount", "workspace", "owner"}
    assert root.is_dir(), "a dry run removes nothing"
    removed = [r for r in collect() if r.owner == oid]
    kinds = {r.kind for r in removed}
    assert kinds >= {"mount", "workspace", "owner"} and ("cgroup" in kinds) == bool(cgroup)
    assert sum(r.bytes for r in removed) > 0
    assert not root.parent.exists() and fs not in mounts()
    assert not Path(info["scratch"]).exists(), "the process's scratch directories go too"
    assert not (lock_root() / "owners" / f"{oid}.lock").exists()
    if cgroup:
        assert not Path(cgroup).exists()
    assert processes_of(int(info["uid"])) == []
    backing = [p.read_text() for p in Path("/sys/block").glob("loop*/loop/backing_file")]
    assert not any(str(root) in b for b in backing), "no loop device left on the image"
    assert [r for r in collect() if r.owner == oid] == [], "nothing left the second time"


def test_the_next_process_cleans_up_at_its_first_sandbox(env: dict[str, str]) -> None:
    info = hold_and_kill(env)
    root = Path(info["root"])
    assert root.is_dir()
    subprocess.run([sys.executable, "-c", ONE_SANDBOX], env=env, check=True, timeout=120)
    assert not root.parent.exists() and info["fs"] not in mounts()


def test_a_live_owner_is_kept_even_when_a_dead_one_had_its_pid(env: dict[str, str]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        live_root = Path(info["root"])
        # a dead owner whose pid is now the live process's (pid reuse): its record names
        # that pid, but nobody holds its lock
        fake = f"o{proc.pid}-deadbeef"
        (lock_root() / "owners" / f"{fake}.lock").write_text(json.dumps({"pid": proc.pid}))
        stale = Path(env["ENVLAB_SANDBOX_DIR"]) / "boxes" / fake
        (stale / "sbx-x" / "fs" / "app").mkdir(parents=True)
        removed = collect()
        assert {r.owner for r in removed} >= {fake}
        assert live_root.parent.name not in {r.owner for r in removed}
        assert not stale.exists() and live_root.is_dir() and info["fs"] in mounts()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    collect()
    assert not live_root.exists()


def test_gc_command_prints_json_and_a_table(env: dict[str, str]) -> None:
    info = hold_and_kill(env)
    oid = Path(info["root"]).parent.name
    cli = [sys.executable, "-m", "envlab.cli.main", "gc"]
    dry = subprocess.run([*cli, "--dry-run"], env=env, capture_output=True, text=True)
    assert dry.returncode == 0 and "would remove" in dry.stdout and "workspace" in dry.stdout
    res = subprocess.run([*cli, "--json"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout) if r["owner"] == oid]
    assert {r["kind"] for r in rows} >= {"mount", "workspace", "owner"}
    assert set(rows[0]) == {"kind", "path", "owner", "bytes", "detail"}
    assert not Path(info["root"]).exists()


def test_two_collections_at_once_remove_everything_once(env: dict[str, str]) -> None:
    """A second gc must not take a dead owner being collected for a live one."""
    info = hold_and_kill(env)
    oid = Path(info["root"]).parent.name
    cli = [sys.executable, "-m", "envlab.cli.main", "gc", "--json"]
    procs = [subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        rows += [r for r in json.loads(out) if r["owner"] == oid]
    assert sorted(r["kind"] for r in rows if r["kind"] in ("workspace", "owner")) == [
        "owner",
        "workspace",
    ]
    assert not Path(info["root"]).exists() and info["fs"] not in mounts()
