"""``storage_mb`` bounds the agent's whole workspace, and grading it costs the host nothing more.

Attacks from the issue: 20 GiB written with ``storage_mb = 1024`` (the bound was per file), an
8 GiB sparse file expanded by the verifier's copy (5.3 GB written on the host)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from envlab.agents.shell import ShellScriptAgent
from envlab.core import Environment, Reward, Status
from envlab.envs.taskfolder import TerminalEnv
from envlab.rollout import EpisodeConfig, EpisodeHooks, PlannedEpisode, episode_ids, run_episode
from envlab.sandbox.workspace import state_dir
from tests.envs.taskfolder.conftest import factory, make_task, write
from tests.sandbox.conftest import requires_bwrap

LIMIT_MB = 32
FILL = """
dd if=/dev/zero of=big bs=1M count=200 2>/dev/null; echo "big: $?"
for i in $(seq 1 40); do dd if=/dev/zero of=part$i bs=1M count=4 2>/dev/null || break; done
truncate -s 1500M sparse; echo "sparse: $?"
mkdir many && (cd many && seq 1 20000 | xargs touch 2>/dev/null); echo "many: $?"
du -sm . | tail -1
"""
# the verifier reads what it can: each file's real size, and the apparent size of the sparse one
TEST_SH = """
du -sm --apparent-size /app > /logs/verifier/du.txt 2>&1
echo 0 > /logs/verifier/reward.txt
"""


def free_bytes() -> int:
    st = os.statvfs(state_dir())
    return st.f_bavail * st.f_frsize


@requires_bwrap
async def test_a_workspace_cannot_outgrow_storage_mb_nor_cost_the_host_more(
    tmp_path: Path,
) -> None:
    path = make_task(tmp_path, test_sh=TEST_SH, toml=f"[environment]\nstorage_mb = {LIMIT_MB}\n")
    agent_sh = tmp_path / "fill.sh"
    write(agent_sh, FILL)
    before = free_bytes()
    seen: dict[str, int] = {}

    async def after_grade(env: Environment, reward: Reward | None) -> dict[str, Any]:
        seen["free"] = free_bytes()  # the workspace (and the sparse file) still exists here
        return {}

    spec = TerminalEnv(path)
    task = spec.tasks()[0]
    planned = PlannedEpisode(
        task, 0, episode_ids(spec.name, spec.content_hash(), task.id, 0, 0),
        factory(ShellScriptAgent(agent_sh)), hooks=EpisodeHooks(after_grade=after_grade),
    )  # fmt: skip
    traj = await run_episode(spec, planned, config=EpisodeConfig())
    assert traj.status is Status.OK and traj.reward == 0.0, (traj.error, traj.grader_failed)
    shown = "\n".join(str(m.get("content", "")) for m in traj.messages)
    used = re.findall(r"^(\d+)\s+\.$", shown, re.MULTILINE)
    assert used and int(used[-1]) <= LIMIT_MB, shown[-2000:]
    assert "big: 0" not in shown and "sparse: 0" in shown, "the attack ran as written"
    # while the workspace and its sparse file existed, the host had lost at most the limit
    lost = before - seen["free"]
    assert lost <= (LIMIT_MB << 20) + (16 << 20), lost >> 20


@requires_bwrap
async def test_a_task_without_storage_mb_is_still_bounded_in_host_mode(tmp_path: Path) -> None:
    """Measured: with no ``storage_mb`` one host-mode command took 4.8 GB of the host's disk.
    Every runtime now bounds the workspace by default (``STORAGE_BYTES``), a filesystem of its
    own the agent sees the size of."""
    from envlab.sandbox.limits import STORAGE_BYTES

    path = make_task(tmp_path, test_sh="echo 0 > /logs/verifier/reward.txt\n")
    agent_sh = tmp_path / "df.sh"
    write(agent_sh, "df -B1 --output=size . | tail -1 | sed 's/^ */size=/'\n")
    spec = TerminalEnv(path, images="off")
    task = spec.tasks()[0]
    planned = PlannedEpisode(
        task, 0, episode_ids(spec.name, spec.content_hash(), task.id, 0, 0),
        factory(ShellScriptAgent(agent_sh)),
    )  # fmt: skip
    traj = await run_episode(spec, planned, config=EpisodeConfig())
    assert traj.status is Status.OK, (traj.error, traj.grader_failed)
    shown = "\n".join(str(m.get("content", "")) for m in traj.messages)
    sizes = [int(s) for s in re.findall(r"size=(\d+)", shown)]
    assert sizes and STORAGE_BYTES * 0.9 <= sizes[-1] <= STORAGE_BYTES, shown[-1000:]
