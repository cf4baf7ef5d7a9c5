"""τ domains with the real embedded model (SmolLM2-135M): as the agent with the scripted user,
and as the simulated user behind ``serve-model``'s HTTP server on 127.0.0.1.

Assertions are on the record, never on what the model says."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.agents.model_agents import smollm2
from envlab.agents.scripted import OracleAgent
from envlab.core import AgentClass, Limits, Status
from envlab.envs.tau.spec import TauAirline, TauRetail
from envlab.rollout import EpisodeConfig, rollout
from envlab.runs import TrajectoryStore

pytest.importorskip("llama_cpp")

UNTIMED = EpisodeConfig(overrides=Limits(step_timeout_s=None, episode_timeout_s=None))


@pytest.fixture(scope="module")
def server():  # type: ignore[no-untyped-def]
    from envlab.models.llamacpp import shared_engine
    from envlab.models.server import BackgroundServer, create_app
    from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path

    engine = shared_engine(smollm2_path(), model_id=SMOLLM2_MODEL_ID)
    with BackgroundServer(create_app(engine, served_name="smollm2")) as srv:
        yield srv


async def test_the_embedded_model_plays_retail_with_the_scripted_user(tmp_path: Path) -> None:
    # two model turns: the CPU cost is the long retail prompt (tools and policy) evaluated per
    # turn; what is asserted needs one scored episode, not a long one
    spec = TauRetail(max_user_turns=2)
    agent = smollm2(max_tokens=48, max_turns=2, max_episode_tokens=8192, n_ctx=8192)
    try:
        await rollout(spec, agent, spec.tasks(n=1), out_dir=tmp_path, config=UNTIMED)
    finally:
        await agent.aclose()
    trajs = TrajectoryStore(tmp_path / "trajectories.jsonl").load()
    assert len(trajs) == 1
    for t in trajs:
        assert t.status.scored, (t.status, t.error)
        assert t.reward is not None and set(t.components) == {"tau", "db_match", "outputs"}
        assert t.messages[0]["role"] == "system" and "retail" in t.messages[0]["content"].lower()
        assert t.messages[1]["role"] == "user"  # the user's opening, as the model received it
        assert t.tools and {x["function"]["name"] for x in t.tools} >= {"get_order_details"}


async def test_a_model_plays_the_user_over_http(server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    spec = TauAirline(
        user="model", user_model=f"openai:smollm2@{server.base_url}", max_user_turns=2
    )
    result = await rollout(
        spec, AgentClass(OracleAgent), spec.tasks(n=1), out_dir=tmp_path, config=UNTIMED
    )
    assert result.records[0].status == Status.OK.value
    (t,) = TrajectoryStore(tmp_path / "trajectories.jsonl").load()
    turns = [s for s in t.steps if s.info.get("user")]
    assert turns, "the user's turns are recorded"
    for s in turns:
        assert s.info["user"]["user"] == "model" and s.info["user"]["model"] == "smollm2"
        assert s.observation.metadata["from"] == "user"
        assert "temperature" in s.info["user"]["sampling"]  # its own sampling, recorded
