"""Stale clean-up: a real envlab process SIGKILLed while it holds a sandbox (workspace, mounted
filesystem, loop device, cgroup) leaves nothing behind after ``envlab gc`` or the next
process's first sandbox; a live process's sandboxes are never touched, whatever its pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envlab.cli.main import app
from envlab.sandbox.gc import collect, exclusive
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


@contextlib.contextmanager
def killed_holder(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """Start an envlab process that holds a sandbox, then SIGKILL it mid-command. Yields what
    it left while holding the host's gc lock: no other envlab process on this host (their
    first sandboxes collect too) removes it before the test has looked."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())  # its own first clean-up is behind it
        with exclusive():
            time.sleep(0.2)  # the sleep command is running
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            yield info
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    state = tmp_path / "state"
    monkeypatch.setenv("ENVLAB_SANDBOX_DIR", str(state))
    return {**os.environ, "ENVLAB_SANDBOX_DIR": str(state)}


def test_gc_removes_everything_of_a_killed_process(env: dict[str, str]) -> None:
    with killed_holder(env) as info:
        check_collected(info)


def check_collected(info: dict[str, str]) -> None:
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
    with killed_holder(env) as info:
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
        with exclusive():
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
    runner = CliRunner()
    with killed_holder(env) as info:
        oid = Path(info["root"]).parent.name
        dry = runner.invoke(app, ["gc", "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "would remove" in dry.output and "workspace" in dry.output
        assert Path(info["root"]).exists()
        res = runner.invoke(app, ["gc", "--json"])
        assert res.exit_code == 0, res.output
        rows = [r for r in json.loads(res.stdout) if r["owner"] == oid]
    assert {r["kind"] for r in rows} >= {"mount", "workspace", "owner"}
    assert set(rows[0]) == {"kind", "path", "owner", "bytes", "detail"}
    assert not Path(info["root"]).exists()


def test_collections_at_once_remove_everything_without_error(env: dict[str, str]) -> None:
    """gc in two processes at once (and any other envlab's first sandbox): each waits for
    the other, none fails, what was left is removed once."""
    cli = [sys.executable, "-m", "envlab.cli.main", "gc", "--json"]
    with killed_holder(env) as info:
        oid = Path(info["root"]).parent.name
        procs = [subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, text=True)]
        procs.append(subprocess.Popen(cli, env=env, stdout=subprocess.PIPE, text=True))
        time.sleep(0.3)  # both are waiting for the lock this test holds
        assert Path(info["root"]).exists()
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        rows += [r for r in json.loads(out) if r["owner"] == oid]
    assert [r["kind"] for r in rows].count("workspace") <= 1
    assert not Path(info["root"]).exists() and info["fs"] not in mounts()
