"""Many episodes sharing one model behind the ``serve-model`` app, in process over ASGI (as
``--agent smollm2`` runs), with a scripted engine in place of llama.cpp: the same app, routes,
queue, client and harness; only the text of the replies is scripted, so the test is quick.

The queue is forced to be long (a request holds the engine for several step limits) while
serving a request takes a small fraction of a step limit: waiting for the model is not the
agent's time. A model that is really slow still times out.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from envlab.agents.harness import HarnessLimits, HarnessSettings, ToolCallingHarness
from envlab.core import Status, Trajectory
from envlab.models.client import OpenAICompatModel, RetryPolicy
from envlab.models.server import create_app
from envlab.models.wire import (
    AssistantMessage,
    ChatRequest,
    ChatResponse,
    Choice,
    FunctionCall,
    Usage,
    WireToolCall,
)
from envlab.rollout import TRAJECTORIES_FILE, EpisodeConfig, TrajectoryStore, rollout
from tests.models.fake_openai import FakeOpenAI, completion, error
from tests.support.envs import EchoEnv

STEP = 2.0
"""The step limit: generous next to serving a scripted reply, smaller than the forced wait."""
HOLD = 2.5 * STEP


class ScriptedEngine:
    """A ``ChatEngine`` like ``LlamaCppEngine`` (blocking ``chat``, one request at a time under a
    lock, honours ``cancel``) whose reply is scripted: a ``repeat`` tool call first, then
    ``ok``. A request whose last message is ``hold`` runs until ``release`` is set."""

    model_id = "scripted"
    weights_hash = None

    def __init__(self, think_s: float = 0.0) -> None:
        self.think_s = think_s
        self.holding, self.release = threading.Event(), threading.Event()
        self.served = 0
        self._lock = threading.Lock()

    def chat(self, request: ChatRequest, cancel: threading.Event | None = None) -> ChatResponse:
        with self._lock:
            last = request.messages[-1].text()
            if last == "hold":
                self.holding.set()
                self.release.wait(60)
            elif self.think_s and cancel is not None:
                cancel.wait(self.think_s)
            self.served += 1
            used_tool = any(m.role == "tool" for m in request.messages)
            if request.tools and not used_tool:
                call = WireToolCall(
                    id=f"call_{self.served}",
                    function=FunctionCall(name="repeat", arguments='{"text": "ok"}'),
                )
                message = AssistantMessage(content=None, tool_calls=[call])
                finish = "tool_calls"
            else:
                message, finish = AssistantMessage(content="ok"), "stop"
            return ChatResponse(
                id=f"chatcmpl-{self.served}",
                created=int(time.time()),
                model=self.model_id,
                choices=[Choice(message=message, finish_reason=finish)],
                usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
            )


def agent(app: Any, max_time_s: float = 60.0) -> ToolCallingHarness:
    def model() -> OpenAICompatModel:
        return OpenAICompatModel(
            "scripted",
            "http://in-process.envlab/v1",
            retry=RetryPolicy(max_retries=0),
            transport=httpx.ASGITransport(app=app),
        )

    return ToolCallingHarness(
        model,
        agent_name="scripted-engine",
        model_id="scripted",
        endpoint="in-process",
        limits=HarnessLimits(max_time_s=max_time_s),
        settings=HarnessSettings(parallel_tool_calls=False),
    )


async def hold(app: Any, engine: ScriptedEngine) -> asyncio.Task[Any]:
    """Occupy the engine with a request from outside any episode."""
    client = OpenAICompatModel("scripted", "http://x/v1", transport=httpx.ASGITransport(app=app))

    async def ask() -> None:
        async with client:
            await client.chat([{"role": "user", "content": "hold"}])

    task = asyncio.create_task(ask())
    assert await asyncio.to_thread(engine.holding.wait, 30), "the holding request never ran"
    return task


async def run(out: Path, n: int, agent_: ToolCallingHarness, **cfg: Any) -> list[Trajectory]:
    env = EchoEnv(n=n)
    await rollout(
        env,
        agent_,
        env.tasks(),
        out_dir=out,
        concurrency=n,
        progress=False,
        env_id="echo",
        episode_config=EpisodeConfig(retry_backoff=0.0, max_retries=0, **cfg),
    )
    return TrajectoryStore(out / TRAJECTORIES_FILE).load()


async def test_episodes_queued_on_the_in_process_model_do_not_time_out(tmp_path: Path) -> None:
    engine = ScriptedEngine()
    app = create_app(engine, served_name="scripted")
    holder = await hold(app, engine)
    # the harness's own time budget is smaller than the wait too: it must not count it either
    runner = asyncio.create_task(
        run(tmp_path / "run", 6, agent(app, max_time_s=2 * STEP), step_timeout=STEP)
    )
    await asyncio.sleep(HOLD)
    engine.release.set()
    trajs = await runner
    await holder
    assert [t.status for t in trajs] == [Status.OK] * 6, [t.error for t in trajs]
    assert [t.reward for t in trajs] == [1.0] * 6
    assert all(t.n_steps == 2 and "harness_stop" not in t.steps[-1].action_info for t in trajs)
    assert all(t.timings.waited_s > 0.0 for t in trajs)
    assert engine.served == 1 + 6 * 2


async def test_a_slow_model_still_times_out_and_says_where(tmp_path: Path) -> None:
    engine = ScriptedEngine(think_s=60.0)
    app = create_app(engine, served_name="scripted")
    trajs = await run(tmp_path / "run", 2, agent(app), step_timeout=STEP)
    assert [t.status for t in trajs] == [Status.TIMEOUT] * 2
    for t in trajs:
        assert "step 0 took longer than step_timeout=2.0s while the agent was acting" in (
            t.error or ""
        )


async def test_a_rate_limited_endpoint_backoff_is_not_the_agents_time(tmp_path: Path) -> None:
    """A 429 asks to come back after 3 step limits; the retry then answers at once."""
    with FakeOpenAI() as fake:
        fake.push(error(429, "slow down", {"Retry-After": str(HOLD)}), completion("ok"))

        def model() -> OpenAICompatModel:
            return OpenAICompatModel("fake", fake.base_url, retry=RetryPolicy(max_retries=2))

        harness = ToolCallingHarness(
            model, agent_name="fake", model_id="fake", endpoint=fake.base_url
        )
        (t,) = await run(tmp_path / "run", 1, harness, step_timeout=STEP)
    assert t.status is Status.OK and t.reward == 1.0, t.error
    assert t.steps[0].action_info["attempts"] == 2
    assert t.timings.waited_s > 0.0
