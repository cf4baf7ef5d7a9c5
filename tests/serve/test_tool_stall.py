"""One client's tool call cannot stall another's episode through ``envlab serve``: a real
server on 127.0.0.1, eight innocent clients and a hostile one whose CPU-bound tool spins past
its budget, each episode driven by the engine through ``RemoteEnv``. The innocent episodes
finish ``ok`` and made progress while the hostile tool ran; the hostile episode is the agent's
tool error, graded 0 by the server (never ``infra_error``)."""

from __future__ import annotations

import pytest

from envlab.core import AgentClass, Status
from envlab.envs import load_env
from envlab.envs.remote import RemoteEnv
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes
from tests.core.test_tool_budget import (
    HONEST_CALLS,
    HOSTILE_SCRIPT,
    SPIN_SAW,
    PacedAgent,
    SpinEnv,
    honest_script,
)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from envlab.serve.server import ServerThread


async def test_a_spinning_tool_through_serve_leaves_innocent_clients_unaffected() -> None:
    HONEST_CALLS.clear()
    with ServerThread(SpinEnv()) as srv:
        spec = load_env(f"ws://{srv.host}:{srv.port}")
        assert isinstance(spec, RemoteEnv)
        planned = []
        for t in spec.tasks():
            script = HOSTILE_SCRIPT if t.id == "hostile" else honest_script()
            ids = episode_ids(spec.name, spec.content_hash(), t.id, 0, 0)
            planned.append(PlannedEpisode(t, 0, ids, AgentClass(PacedAgent, script)))
        cfg = EpisodeConfig(max_retries=0)
        done = await run_episodes(spec, planned, config=cfg, concurrency=9)
        assert srv.sessions.live_episodes == 0
    by_task = {t.task_id: t for t in done}
    hostile = by_task.pop("hostile")
    assert SPIN_SAW and SPIN_SAW[-1] > 0, "no innocent call ran while the hostile tool spun"
    assert len(by_task) == 8
    for t in by_task.values():
        assert t.status is Status.OK and t.reward == 1.0, (t.task_id, t.status, t.error)
    assert hostile.status is Status.OK and hostile.reward == 0.0, (hostile.status, hostile.error)
    (result,) = hostile.steps[0].observation.tool_results
    assert result.is_error and "was stopped" in result.content and "tool_call_s" in result.content
