"""Two real ``envlab eval`` processes on one run directory: the second is refused."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from envlab.core import Action, StepResult
from envlab.envs.arith import ArithConfig, ArithEnv, ArithEpisode
from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


class GatedArithEpisode(ArithEpisode):
    """An ``arith`` episode whose step waits until the file ``gate`` exists (the test opens it)."""

    async def step(self, action: Action) -> StepResult:
        assert isinstance(self.spec, GatedArith)
        gate = Path(self.spec.config.gate)
        while not gate.exists():
            await asyncio.sleep(0.01)
        return await super().step(action)


class GatedArithConfig(ArithConfig):
    gate: str = ""


class GatedArith(ArithEnv):
    Config = GatedArithConfig
    environment = GatedArithEpisode
    config: GatedArithConfig


def _args(out: Path, gate: Path) -> list[str]:
    return ["eval", "tests.runs.test_lock:GatedArith", "--agent", "oracle", "--tasks",
            "20", "--samples", "2", "--out", str(out), "--env-arg", f"gate={gate}",
            "--no-progress"]  # fmt: skip


def test_a_second_resume_at_once_is_refused_naming_the_first(tmp_path: Path) -> None:
    # attack: two `--resume` of one run at once used to record thousands of episodes twice
    out, gate = tmp_path / "run", tmp_path / "gate"
    first = subprocess.Popen([*ENVLAB, *_args(out, gate)], env=subprocess_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.time() + 200  # a guard against a hang, not a speed bound
        while not (out / "run.json").exists() and first.poll() is None:
            assert time.time() < deadline, "the first run did not start"
            time.sleep(0.02)
        assert first.poll() is None, first.communicate()[1]  # it waits at its gate
        second = subprocess.run([*ENVLAB, *_args(out, gate), "--resume"], env=subprocess_env(),
                                capture_output=True, text=True, timeout=120)  # fmt: skip
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}" in second.stderr and "Traceback" not in second.stderr
    finally:
        gate.touch()
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    ids = [json.loads(line)["episode_id"] for line in (out / "trajectories.jsonl").open()]
    assert len(ids) == 40 and len(set(ids)) == 40
    again = subprocess.run([*ENVLAB, *_args(out, gate), "--resume", "--json"],
                           env=subprocess_env(), capture_output=True, text=True,
                           timeout=120)  # fmt: skip
    assert again.returncode == 0, again.stderr  # the lock went with its holder
    assert json.loads(again.stdout)["n_episodes"] == 40
