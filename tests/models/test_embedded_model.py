"""The real embedded model (SmolLM2-135M, GGUF) acting in ``calc``, on each installed engine.

Every test runs once per local engine (llama.cpp, torch; ``conftest.ENGINES``, a missing one
skipped). The model is loaded once per test session and engine; the in-process agent and the
HTTP server share it. Generation is kept short (64 tokens a turn, 4 turns): on llama.cpp this
file takes well under a minute, on torch (float32 on the CPU, ~10x slower) a few minutes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from envlab.agents.model_agents import EmbeddedApp, openai, smollm2
from envlab.core import AgentFactory, Limits, Trajectory
from envlab.envs.calc import CalcEnv
from envlab.models.client import OpenAICompatModel
from envlab.models.engine import Engine
from envlab.models.local import ENGINE_ENV
from envlab.models.server import BackgroundServer, create_app, free_port
from envlab.models.weights import SMOLLM2_MODEL_ID
from envlab.models.wire import ChatMessage, ChatRequest, ChatResponse
from envlab.rollout import EpisodeConfig, rollout
from envlab.runs import TrajectoryStore
from tests.conftest import subprocess_env
from tests.models.conftest import ENGINES

SHORT = {"max_tokens": 64, "max_turns": 4, "temperature": 0.3, "max_time_s": 3600.0}
"""Short generations; no time limit that a slow, busy machine could reach (pytest's timeout
guards a hang): these tests check what the model's replies do, not how fast they come."""
UNTIMED = EpisodeConfig(overrides=Limits(step_timeout_s=None, episode_timeout_s=None))
ADD_TOOL = CalcEnv().new_episode().tools[0].to_openai()


@pytest.fixture(scope="session")
def server(engine: Engine):
    with BackgroundServer(create_app(engine, served_name="smollm2")) as srv:
        yield srv


async def run_calc(agent: AgentFactory, out: Path, n: int = 3) -> list[Trajectory]:
    env = CalcEnv()
    try:
        result = await rollout(
            env, agent, env.tasks(n=n), out_dir=out, samples=1, concurrency=2, config=UNTIMED
        )
    finally:
        await agent.aclose()
    assert result.new_episodes == n
    return TrajectoryStore(out / "trajectories.jsonl").load()


def check_episodes(trajs: list[Trajectory]) -> None:
    """Tool calls were parsed and executed, rewards recorded, tokens kept."""
    for t in trajs:
        assert t.status.scored, (t.status, t.error)
        assert t.reward is not None and set(t.components) == {"correct", "computed_with_tools"}
        calls = [m for m in t.messages if m["role"] == "assistant" and m.get("tool_calls")]
        results = [m for m in t.messages if m["role"] == "tool"]
        assert calls and results, f"no tool call in {t.episode_id}: {t.messages}"
        assert results[0]["tool_call_id"] == calls[0]["tool_calls"][0]["id"]
        assert "completion_ids" not in t.steps[0].action.info, "token ids are stored once"
    executed = [
        m["content"]
        for t in trajs
        for m in t.messages
        if m["role"] == "tool" and not m["content"].startswith("Error:")
    ]
    assert executed, "no tool call ran without an error"
    views = [t.tokens for t in trajs if t.tokens is not None]
    assert views, "no episode kept its token view"
    for v in views:
        assert len(v.completion_ids) == len(v.loss_mask) == len(v.logprobs) > 0
        assert all(lp <= 0.0 for lp in v.logprobs) and 1 in v.loss_mask


async def test_in_process_agent_acts_in_calc(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENGINE_ENV, engine.backend)
    agent = smollm2(**SHORT)
    trajs = await run_calc(agent, tmp_path / "run")
    check_episodes(trajs)
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (engine.backend == "torch") == run["agent"]["endpoint"].endswith("(torch engine)")
    assert run["agent"]["weights_hash"] == engine.weights_hash
    assert run["agent"]["model_id"] == SMOLLM2_MODEL_ID
    assert run["agent"]["harness"] == "tool-calling/native"
    assert trajs[0].agent.sampling["temperature"] == 0.3


async def test_openai_agent_over_http_acts_in_calc(
    server: BackgroundServer, tmp_path: Path
) -> None:
    agent = openai(
        f"smollm2@{server.base_url}",
        logprobs=True,
        required_tool_turns=1,
        parallel_tool_calls=False,
        timeout_s=3600.0,
        **SHORT,
    )
    trajs = await run_calc(agent, tmp_path / "run")
    check_episodes(trajs)
    assert trajs[0].agent.endpoint == server.base_url
    assert trajs[0].steps[0].action.info["model"] == "smollm2"


async def test_server_answers_with_tool_calls_token_ids_and_logprobs(
    server: BackgroundServer,
) -> None:
    async with httpx.AsyncClient(timeout=None) as client:  # pytest-timeout guards a hang
        models = (await client.get(f"{server.base_url}/models")).json()
        assert models["data"][0]["id"] == "smollm2"
        assert models["data"][0]["weights_hash"].startswith("sha256:")
        body = {
            "model": "smollm2",
            "messages": [{"role": "user", "content": "Add 2 and 3."}],
            "tools": [ADD_TOOL],
            "tool_choice": "required",
            "parallel_tool_calls": False,
            "temperature": 0,
            "max_tokens": 40,
            "logprobs": True,
            "top_logprobs": 3,
        }
        data = (await client.post(f"{server.base_url}/chat/completions", json=body)).json()
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "tool_calls", choice
    call = choice["message"]["tool_calls"][0]["function"]
    assert call["name"] == "add" and isinstance(json.loads(call["arguments"]), dict)
    lps = choice["logprobs"]["content"]
    assert len(lps) == len(choice["token_ids"]) == data["usage"]["completion_tokens"] > 0
    assert len(lps[0]["top_logprobs"]) == 3
    assert lps[0]["logprob"] <= 0 and lps[0]["top_logprobs"][0]["logprob"] >= lps[0]["logprob"]
    assert data["prompt_token_ids"][0] == 1  # <|im_start|>
    # a plain chat without tools ends with <|im_end|> (id 2), which is kept in token_ids
    async with OpenAICompatModel("smollm2", server.base_url, timeout_s=3600.0) as model:
        reply = await model.chat([{"role": "user", "content": "Say hi."}], max_tokens=40)
    assert reply.text and reply.completion_ids
    if reply.finish_reason == "stop":
        assert reply.completion_ids[-1] == 2


async def test_server_rejects_what_it_cannot_serve(server: BackgroundServer) -> None:
    async with httpx.AsyncClient(timeout=None) as client:  # pytest-timeout guards a hang
        url = f"{server.base_url}/chat/completions"
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
        r = await client.post(url, json={"model": "gpt-9", "messages": msgs})
        assert r.status_code == 404 and "serves 'smollm2'" in r.json()["error"]["message"]
        r = await client.post(url, json={"messages": msgs, "stream": True})
        assert r.status_code == 400 and "streaming" in r.json()["error"]["message"]
        r = await client.post(url, json={"messages": "nope"})
        assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
        r = await client.post(url, json={"messages": [{"role": "user", "content": "x" * 40000}]})
        assert r.status_code == 400 and "--n-ctx" in r.json()["error"]["message"]


def _serve_model_argv(port: int) -> list[str]:
    """``envlab serve-model`` once the CLI registers it; until then the same typer command."""
    from envlab.cli.main import app

    names = {c.name for c in app.registered_commands}
    if "serve-model" in names:
        return [sys.executable, "-m", "envlab.cli.main", "serve-model", "--port", str(port)]
    code = "import typer; from envlab.cli.serve_model import serve_model_cmd as c; typer.run(c)"
    return [sys.executable, "-c", code, "--port", str(port)]


@pytest.mark.parametrize("backend", ENGINES)
async def test_serve_model_command_serves_an_episode(tmp_path: Path, backend: str) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [*_serve_model_argv(port), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**subprocess_env(), ENGINE_ENV: backend},
        text=True,
    )
    try:
        details = json.loads(proc.stdout.readline() if proc.stdout else "{}")
        assert details["url"] == f"http://127.0.0.1:{port}/v1" and details["model"] == "smollm2"
        assert details["engine"] == backend
        while True:  # until it answers or dies; pytest's timeout guards a hang
            try:
                httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).raise_for_status()
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                await asyncio.sleep(0.1)
        agent = openai(
            f"smollm2@{details['url']}", required_tool_turns=1, timeout_s=3600.0, **SHORT
        )
        trajs = await run_calc(agent, tmp_path / "run", n=1)
        assert trajs[0].status.scored and trajs[0].reward is not None
        assert any(m["role"] == "tool" for m in trajs[0].messages)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


COUNT = [{"role": "user", "content": "Count from 1 to 1000, separated by commas."}]


async def until(condition: Callable[[], bool], unless: asyncio.Task[Any]) -> None:
    """Wait for ``condition`` (no time limit of its own: pytest's timeout is the guard)."""
    while not condition():
        assert not unless.done(), f"the request ended first: {unless.result()!r}"
        await asyncio.sleep(0.02)


async def test_cancelled_request_stops_the_generation_in_process(engine: Engine) -> None:
    """A request cancelled mid-generation (as a step timeout does) stops at the next token and
    frees the engine: the engine reports it ``cancelled``, far short of the 3000 tokens it would
    otherwise have produced (``ignore_eos``: the model cannot end the turn by itself)."""
    transport = httpx.ASGITransport(app=EmbeddedApp.shared(backend=engine.backend))
    async with OpenAICompatModel("smollm2", "http://x/v1", transport=transport) as model:
        request = asyncio.create_task(
            model.chat(COUNT, max_tokens=3000, temperature=0, ignore_eos=True)
        )
        await until(lambda: engine.active is not None and len(engine.active.ids) >= 3, request)
        request.cancel()
        with pytest.raises(asyncio.CancelledError):
            await request
        # served after the cancelled one, by the same engine: it was freed
        reply = await model.chat([{"role": "user", "content": "hi"}], max_tokens=1)
    assert reply.usage["completion_tokens"] == 1
    (cancelled,) = [g for g in engine.recent if g.max_tokens == 3000]
    assert cancelled.finish_reason == "cancelled"
    assert 3 <= len(cancelled.ids) < 3000


async def test_the_engine_honours_max_tokens_and_stop(engine: Engine) -> None:
    """Limits as the engine reports them in token counts, whatever the model would write."""
    msgs = [ChatMessage(**m) for m in COUNT]

    async def chat(**kw: Any) -> ChatResponse:
        return await asyncio.to_thread(engine.chat, ChatRequest(messages=msgs, **kw))

    r = await chat(max_tokens=7, temperature=0, ignore_eos=True)
    (choice,) = r.choices
    assert r.usage is not None and r.usage.completion_tokens == 7 == len(choice.token_ids or [])
    assert choice.finish_reason == "length"
    r = await chat(max_tokens=7, temperature=0)  # the model may end its turn earlier
    (choice,) = r.choices
    assert r.usage is not None and 1 <= r.usage.completion_tokens <= 7
    assert (choice.finish_reason == "length") == (r.usage.completion_tokens == 7)
    # a stop string: the text of the model's own first tokens, asked again greedily
    first = b"".join(engine.piece(t) for t in (choice.token_ids or [])[:3]).decode()
    r = await chat(max_tokens=7, temperature=0, stop=[first])
    (choice,) = r.choices
    assert choice.finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens <= 3
    assert first not in (choice.message.content or "")
