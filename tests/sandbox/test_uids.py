"""A host-wide uid lease: two envlab processes with different ``ENVLAB_SANDBOX_DIR`` never share
a sandbox uid, so neither can kill the other's commands (``kill_all`` kills by uid)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.sandbox.conftest import requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]

BOXES = 4
# 8 uids for 2 x 4 sandboxes: with a lease per state directory they would almost surely
# collide (a 1 in 70 chance not to); with a host-wide lease they cannot
SLOTS = 2 * BOXES

PROCESS = """
import asyncio, json, sys, time
from pathlib import Path
from envlab.sandbox import BubblewrapSandbox, Limits

role, sync, BOXES = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
other = "b" if role == "a" else "a"

def wait_for(path):
    while not path.exists():
        time.sleep(0.01)

async def main():
    boxes = [await BubblewrapSandbox.create(limits=Limits(timeout_s=120)) for _ in range(BOXES)]
    (sync / f"{role}.uids").write_text(json.dumps([b.uid for b in boxes]))
    wait_for(sync / f"{other}.uids")
    if role == "a":  # long commands that must survive b killing its own sandboxes
        runs = [asyncio.create_task(b.exec("sleep 2; echo alive")) for b in boxes]
        await asyncio.sleep(0.5)
        (sync / "a.running").touch()
        out = [r.stdout for r in await asyncio.gather(*runs)]
    else:
        wait_for(sync / "a.running")
        timed_out = (await boxes[0].exec("sleep 5", timeout=0.2)).timed_out  # kills by uid
        out = [await b.kill_all() for b in boxes] + [timed_out]
    print(json.dumps(out))
    for b in boxes:
        await b.close()

asyncio.run(main())
"""


def test_two_processes_with_different_state_dirs_never_share_a_uid(tmp_path: Path) -> None:
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = {}
    for role in ("a", "b"):
        env = {
            **os.environ,
            "ENVLAB_SANDBOX_DIR": str(tmp_path / f"state-{role}"),
            "ENVLAB_SANDBOX_UID_BASE": "1900200000",
            "ENVLAB_SANDBOX_UID_SLOTS": str(SLOTS),
        }
        procs[role] = subprocess.Popen(
            [sys.executable, "-c", PROCESS, role, str(sync), str(BOXES)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    outs = {}
    for role, proc in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 0, stderr
        outs[role] = json.loads(stdout.strip().splitlines()[-1])
    uids = {role: set(json.loads((sync / f"{role}.uids").read_text())) for role in procs}
    assert len(uids["a"]) == len(uids["b"]) == BOXES
    assert uids["a"].isdisjoint(uids["b"]), uids
    assert outs["a"] == ["alive\n"] * BOXES, "b's kills never reached a's commands"
    assert outs["b"][-1] is True  # b's own timed-out command was killed (and swept by uid)
