"""Model agents: a factory per run, one pooled HTTP client shared by every episode.

Many episodes share one model behind the ``serve-model`` app, in process over ASGI (as
``--agent smollm2`` runs), with a scripted engine in place of llama.cpp: the same app, routes,
queue, client and harness; only the text of the replies is scripted, so the test is quick.
The queue is forced to be long (a request holds the engine for several step limits) while
serving a request takes a small fraction of a step limit: waiting for the model is not the
agent's time. A model that is really slow still times out.

Against a real HTTP server on 127.0.0.1, a run of many episodes opens ONE client and at most
as many connections as episodes in flight. Loading agents by name gives factories.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import envlab.agents.model_agents as model_agents
from envlab.agents import AGENTS, load_agent
from envlab.agents.harness import HarnessLimits, HarnessSettings
from envlab.agents.model_agents import ModelAgentFactory, openai
from envlab.agents.scripted import NoopAgent, RandomAgent
from envlab.core import AgentClass, AgentFactory, ConfigError, EnvSpec, Limits, Status, Trajectory
from envlab.envs.arith import ArithEnv
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
from envlab.rollout import EpisodeConfig, rollout
from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore
from tests.models.fake_openai import FakeOpenAI, Scripted, completion, error
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


def factory(
    make_client: Any, name: str = "scripted", max_time_s: float = 60.0, retries: int = 0
) -> ModelAgentFactory:
    def model(client: model_agents.ModelHTTP | None) -> OpenAICompatModel:
        return OpenAICompatModel(
            name,
            "http://in-process.envlab/v1",
            retry=RetryPolicy(max_retries=retries),
            client=client,
        )

    return ModelAgentFactory(
        model,
        make_client,
        agent_name=name,
        model_id=name,
        endpoint="in-process",
        limits=HarnessLimits(max_time_s=max_time_s),
        settings=HarnessSettings(parallel_tool_calls=False),
    )


def in_process(app: Any, max_time_s: float = 60.0) -> ModelAgentFactory:
    def client() -> model_agents.ModelHTTP:
        transport = httpx.ASGITransport(app)
        return model_agents.ModelHTTP("http://in-process.envlab/v1", transport=transport)

    return factory(client, max_time_s=max_time_s)


async def hold(app: Any, engine: ScriptedEngine) -> asyncio.Task[Any]:
    """Occupy the engine with a request from outside any episode."""
    client = OpenAICompatModel("scripted", "http://x/v1", transport=httpx.ASGITransport(app=app))

    async def ask() -> None:
        async with client:
            await client.chat([{"role": "user", "content": "hold"}])

    task = asyncio.create_task(ask())
    assert await asyncio.to_thread(engine.holding.wait, 30), "the holding request never ran"
    return task


async def run(
    out: Path,
    agents: AgentFactory,
    spec: EnvSpec | None = None,
    n: int = 6,
    concurrency: int | None = None,
    model_failures: str = "agent",
    **limits: Any,
) -> list[Trajectory]:
    spec = spec or EchoEnv(n=n)
    try:
        await rollout(
            spec,
            agents,
            spec.tasks(n=n),
            out_dir=out,
            concurrency=concurrency or n,
            config=EpisodeConfig(
                overrides=Limits.overrides(**limits),
                retry_backoff=0.0,
                max_retries=0,
                model_failures=model_failures,  # type: ignore[arg-type]
            ),
        )
    finally:
        await agents.aclose()
    return TrajectoryStore(out / TRAJECTORIES_FILE).load()


class CountedClients:
    """Every ``ModelHTTP`` client the agents make while installed (real clients, counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.made: list[model_agents.ModelHTTP] = []
        made, base = self.made, model_agents.ModelHTTP

        class Counted(base):  # type: ignore[misc, valid-type]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                made.append(self)

        monkeypatch.setattr(model_agents, "ModelHTTP", Counted)


async def test_episodes_queued_on_the_in_process_model_do_not_time_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = ScriptedEngine()
    app = create_app(engine, served_name="scripted")
    holder = await hold(app, engine)
    clients = CountedClients(monkeypatch)
    # the harness's own time budget is smaller than the wait too: it must not count it either
    agents = in_process(app, max_time_s=2 * STEP)
    runner = asyncio.create_task(run(tmp_path / "run", agents, step_timeout_s=STEP))
    await asyncio.sleep(HOLD)
    engine.release.set()
    trajs = await runner
    await holder
    assert [t.status for t in trajs] == [Status.OK] * 6, [t.error for t in trajs]
    assert [t.reward for t in trajs] == [1.0] * 6
    assert all(t.n_steps == 2 and "harness_stop" not in t.steps[-1].action.info for t in trajs)
    assert all(t.timings.waited_s > 0.0 for t in trajs)
    assert engine.served == 1 + 6 * 2
    # six episodes, twelve requests, one client over the app; closed with the run
    assert len(clients.made) == 1 and clients.made[0].closed


async def test_a_slow_model_still_times_out_and_says_where(tmp_path: Path) -> None:
    engine = ScriptedEngine(think_s=60.0)
    app = create_app(engine, served_name="scripted")
    trajs = await run(tmp_path / "run", in_process(app), n=2, step_timeout_s=STEP)
    assert [t.status for t in trajs] == [Status.TIMEOUT] * 2
    for t in trajs:
        assert t.error is not None and t.error.kind == "timeout"
        assert "step_timeout" in t.error.message and "2.0s" in t.error.message, t.error


@pytest.mark.parametrize("policy", ["agent", "exclude"])
async def test_a_rate_limited_endpoint_backoff_is_whose_time_the_run_says(
    tmp_path: Path, policy: str
) -> None:
    """A 429 asks to come back after 3 step limits; the retry then answers at once. The agent's
    own endpoint: its wait is the agent's time (a timeout, scored); a trusted endpoint's
    (``--model-failures exclude``): not the agent's time."""
    with FakeOpenAI() as fake:
        fake.push(error(429, "slow down", {"Retry-After": str(HOLD)}), completion("ok"))
        agents = factory(lambda: model_agents.ModelHTTP(fake.base_url), name="fake", retries=2)
        agents._make_model = _at(agents._make_model, fake.base_url)
        (t,) = await run(tmp_path / "run", agents, n=1, step_timeout_s=STEP, model_failures=policy)
    if policy == "agent":
        assert t.status is Status.TIMEOUT and t.scored and t.reward == 0.0, t.error
        assert t.timings.waited_s == 0.0
        return
    assert t.status is Status.OK and t.reward == 1.0, t.error
    assert t.steps[0].action.info["attempts"] == 2
    assert t.timings.waited_s > 0.0


def _at(make_model: Any, url: str) -> Any:
    """``make_model`` pointed at ``url`` instead of the in-process address."""

    def model(client: model_agents.ModelHTTP | None) -> OpenAICompatModel:
        m: OpenAICompatModel = make_model(client)
        m.base_url = url
        return m

    return model


def right_answer(tasks: dict[str, float]) -> Any:
    """A reply to each arith request: the right number for the prompt it carries."""

    def respond(body: dict[str, Any]) -> Scripted:
        prompt = next(m["content"] for m in reversed(body["messages"]) if m["role"] == "user")
        return completion(f"The answer is {tasks[prompt]:g}.")

    return respond


async def test_a_run_of_many_episodes_against_one_endpoint_opens_one_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = ArithEnv()
    answers = {t.prompt: float(t.answer) for t in spec.tasks(n=20)}
    clients = CountedClients(monkeypatch)
    with FakeOpenAI(respond=right_answer(answers)) as fake:
        agents = openai(f"fake@{fake.base_url}")
        trajs = await run(tmp_path / "run", agents, spec, n=20, concurrency=4)
        assert len(fake.requests) == 20
        # kept-alive connections, reused: never more than the episodes in flight
        assert 1 <= len(fake.connections) <= 4, fake.connections
    assert [t.status for t in trajs] == [Status.OK] * 20, [t.error for t in trajs]
    assert [t.reward for t in trajs] == [1.0] * 20
    assert len(clients.made) == 1, "one pooled client per endpoint per run"
    assert clients.made[0].closed, "the factory's aclose() closes it"


def test_a_factory_used_by_two_event_loops_makes_a_client_in_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clients = CountedClients(monkeypatch)
    with FakeOpenAI(respond=lambda body: completion("ok")) as fake:
        agents = openai(f"fake@{fake.base_url}")

        async def episode(close: bool) -> str:
            agent = agents.new_agent()
            reply = await agent._model.chat([{"role": "user", "content": "hi"}])
            await agent.close()
            if close:
                await agents.aclose()
            return reply.text

        assert asyncio.run(episode(close=False)) == "ok"
        # the first loop is gone, and its connections with it: a new client for the new loop
        assert asyncio.run(episode(close=True)) == "ok"
        assert asyncio.run(episode(close=False)) == "ok"
        asyncio.run(agents.aclose())  # from a loop that is not the client's: dropped, no error
    assert len(clients.made) == 3 and clients.made[1].closed


async def test_the_spec_is_computed_once_and_agents_borrow_the_client() -> None:
    with FakeOpenAI() as fake:
        agents = openai(f"m@{fake.base_url}", temperature=0.5, max_turns=3)
        first, second = agents.new_agent(), agents.new_agent()
        assert first._model.borrows_client and first._model._http() is second._model._http()
        assert first.spec == agents.spec and agents.spec.sampling["temperature"] == 0.5
        assert agents.spec.limits["max_turns"] == 3 and agents.spec.endpoint == fake.base_url
        await first.close()
        assert not agents.client().closed  # an episode's end leaves the run's client open
        await agents.aclose()


def test_load_agent_gives_factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(AGENTS._local, "noop", NoopAgent)  # the entry points, in code
    monkeypatch.setitem(AGENTS._local, "random", RandomAgent)
    monkeypatch.setitem(AGENTS._local, "openai", openai)
    noop = load_agent("noop")
    assert isinstance(noop, AgentClass) and noop.spec.name == "noop"
    assert noop.new_agent() is not noop.new_agent()
    assert load_agent("random", max_tool_steps=1).spec.limits == {"max_tool_steps": 1}
    model = load_agent("openai:m@http://127.0.0.1:9/v1", max_turns=2)
    assert isinstance(model, ModelAgentFactory) and model.spec.limits["max_turns"] == 2
    with pytest.raises(ConfigError, match="cannot build agent 'random'"):
        load_agent("random", no_such_setting=1)
    with pytest.raises(ConfigError, match="harness limits must be positive"):
        load_agent("openai:m@http://127.0.0.1:9/v1", max_turns=0)


def test_a_function_making_one_agent_is_called_once_per_episode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def make_agent(max_tool_steps: int = 3) -> RandomAgent:
        return RandomAgent(max_tool_steps)

    monkeypatch.setitem(AGENTS._local, "mine", make_agent)
    agents = load_agent("mine", max_tool_steps=2)
    assert agents.new_agent() is not agents.new_agent()
    assert agents.spec.limits == {"max_tool_steps": 2}


def test_shell_without_a_file_says_how_to_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envlab.agents.shell import ShellScriptAgent

    monkeypatch.setitem(AGENTS._local, "shell", ShellScriptAgent)
    for name in ("shell", "shell:"):
        with pytest.raises(ConfigError) as e:
            load_agent(name)
        assert "--agent shell:FILE" in str(e.value) and "solve.sh" in str(e.value)
    with pytest.raises(ConfigError, match="cannot read script"):
        load_agent(f"shell:{tmp_path / 'missing.sh'}")
    script = tmp_path / "solve.sh"
    script.write_text("echo 42 > /app/answer.txt\n")
    assert load_agent(f"shell:{script}").spec.name == f"shell:{script}"
