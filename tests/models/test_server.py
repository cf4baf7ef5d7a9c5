"""The serve-model app's queue at the engine, with a scripted engine (the app, routes, queue
and client are the real ones; the engine's replies are scripted)."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx

from envlab.models.client import OpenAICompatModel, RetryPolicy
from envlab.models.server import create_app, engine_turnstile
from envlab.models.wire import AssistantMessage, ChatRequest, ChatResponse, Choice, Usage


class OverlapEngine:
    """Records how many requests it serves at once. A request saying ``long`` generates until
    cancelled, then takes a little longer to stop (the token in progress), as llama.cpp does."""

    model_id = "overlap"
    weights_hash = None

    def __init__(self) -> None:
        self.active = self.most = self.served = 0
        self.started = threading.Event()
        self._count = threading.Lock()

    def chat(self, request: ChatRequest, cancel: threading.Event | None = None) -> ChatResponse:
        with self._count:
            self.active += 1
            self.most = max(self.most, self.active)
        try:
            if request.messages[-1].text() == "long" and cancel is not None:
                self.started.set()
                cancel.wait(60)
                time.sleep(0.2)  # finishing the token in progress after the cancellation
            self.served += 1
            return ChatResponse(
                choices=[Choice(message=AssistantMessage(content="ok"), finish_reason="stop")],
                usage=Usage(prompt_tokens=1, completion_tokens=1, total_tokens=2),
            )
        finally:
            with self._count:
                self.active -= 1


async def test_a_cancelled_request_keeps_its_turn_until_the_engine_stopped() -> None:
    engine = OverlapEngine()
    app = create_app(engine, served_name="overlap")
    transport = httpx.ASGITransport(app=app)
    async with OpenAICompatModel(
        "overlap", "http://x/v1", transport=transport, retry=RetryPolicy(max_retries=0)
    ) as model:
        long = asyncio.create_task(model.chat([{"role": "user", "content": "long"}]))
        assert await asyncio.to_thread(engine.started.wait, 30)
        others = [
            asyncio.create_task(model.chat([{"role": "user", "content": f"hi {i}"}]))
            for i in range(3)
        ]
        await asyncio.sleep(0)
        long.cancel()  # as a step timeout does
        replies = await asyncio.gather(*others)
    assert [r.text for r in replies] == ["ok"] * 3
    assert engine.most == 1, "two requests ran in the engine at once"
    assert engine.served == 4 and engine_turnstile(engine).waiting == 0


async def test_two_apps_serving_one_engine_share_its_queue() -> None:
    engine = OverlapEngine()
    assert engine_turnstile(engine) is engine_turnstile(engine)
    apps = [create_app(engine, served_name="overlap") for _ in range(2)]
    models = [
        OpenAICompatModel("overlap", "http://x/v1", transport=httpx.ASGITransport(app=a))
        for a in apps
    ]
    replies = await asyncio.gather(
        *(m.chat([{"role": "user", "content": "hi"}]) for m in models * 4)
    )
    for m in models:
        await m.aclose()
    assert len(replies) == 8 and engine.most == 1
