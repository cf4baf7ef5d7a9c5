"""``envlab.cli.evaluate``: the orchestration of ``eval`` (rollout, then the summary)."""

from __future__ import annotations

import json
from pathlib import Path

from envlab.cli.evaluate import evaluate
from envlab.core import Action, AgentClass, Trajectory
from envlab.rollout import watch
from tests.support.envs import EchoEnv, ScriptAgent


async def test_episodes_go_through_the_driver_and_components_are_averaged(
    tmp_path: Path,
) -> None:
    spec = EchoEnv(n=3)
    seen: list[Trajectory] = []
    with watch(seen.append):
        ev = await evaluate(spec, AgentClass(ScriptAgent, []), spec.tasks(), out_dir=tmp_path,
                            samples=2)  # fmt: skip
    assert len(seen) == 6 and ev.summary.n_scored == 6 and not ev.nothing_scored
    assert ev.details.components == {"answered_ok": 1.0}
    assert ev.details.first_errors == {}
    assert json.loads((tmp_path / "summary.json").read_text())["n_episodes"] == 6


async def test_first_error_of_each_status_and_nothing_scored(tmp_path: Path) -> None:
    spec = EchoEnv(mode="reset_crash", n=2)
    ev = await evaluate(spec, AgentClass(ScriptAgent, []), spec.tasks(), out_dir=tmp_path)
    assert ev.nothing_scored and ev.summary.status_counts["env_error"] == 2
    why = ev.details.first_errors["env_error"]
    assert why.startswith("env in reset:") and "broken reset" in why
    assert ev.details.components == {}


async def test_a_resumed_run_reports_the_earlier_episodes_too(tmp_path: Path) -> None:
    spec = EchoEnv(n=2)
    agent = AgentClass(ScriptAgent, [Action(text="not ok")])
    await evaluate(spec, agent, spec.tasks(), out_dir=tmp_path)
    again = await evaluate(spec, agent, spec.tasks(), out_dir=tmp_path, resume=True)
    assert again.result.new_episodes == 0 and again.result.skipped_episodes == 2
    assert again.details.components == {"answered_ok": 0.0}  # read back from the store
