"""Agents backed by a real model: ``smollm2`` (embedded, in-process) and ``openai:MODEL@URL``.

Both are a ``ToolCallingHarness`` over an ``OpenAICompatModel``. ``smollm2`` sends its requests
to the very app that ``envlab serve-model`` serves, through ``httpx.ASGITransport`` instead of a
socket: the same client, the same routes, the same engine code as a remote endpoint.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any, ClassVar, Literal

from envlab.agents.harness import (
    DEFAULT_INSTRUCTIONS,
    HarnessLimits,
    HarnessSettings,
    ToolCallingHarness,
)
from envlab.core import ConfigError, not_agent_time
from envlab.models.client import OpenAICompatModel, RetryPolicy, Sampling

SMOLLM2_NAME = "smollm2"
IN_PROCESS_URL = "http://in-process.envlab/v1"


class EmbeddedApp:
    """The ``serve-model`` ASGI app for the embedded model, loaded on the first request.

    One per process and settings (``shared``): every episode's client talks to it, and the
    engine's queue makes concurrent episodes take turns at the model; neither loading the
    weights nor waiting in that queue is on an episode's clock (``core.clock``).
    """

    _instances: ClassVar[dict[tuple[int, int | None], EmbeddedApp]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, n_ctx: int, n_threads: int | None) -> None:
        self.n_ctx, self.n_threads = n_ctx, n_threads
        self._app: Any = None
        self._load_lock = threading.Lock()

    @classmethod
    def shared(cls, n_ctx: int = 4096, n_threads: int | None = None) -> EmbeddedApp:
        with cls._guard:
            key = (n_ctx, n_threads)
            if key not in cls._instances:
                cls._instances[key] = cls(n_ctx, n_threads)
            return cls._instances[key]

    def load(self) -> Any:
        with self._load_lock:
            if self._app is None:
                from envlab.models.llamacpp import shared_engine
                from envlab.models.server import create_app
                from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path

                engine = shared_engine(
                    smollm2_path(),
                    model_id=SMOLLM2_MODEL_ID,
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                )
                self._app = create_app(engine, served_name=SMOLLM2_NAME)
            return self._app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        app = self._app
        if app is None:
            async with not_agent_time("model load"):  # the first request loads the weights
                app = await asyncio.to_thread(self.load)
        await app(scope, receive, send)


def _limits(max_turns: int, max_episode_tokens: int, max_time_s: float) -> HarnessLimits:
    return HarnessLimits(max_turns=max_turns, max_tokens=max_episode_tokens, max_time_s=max_time_s)


def smollm2(
    *,
    temperature: float = 0.3,
    top_p: float = 0.95,
    max_tokens: int = 128,
    max_turns: int = 8,
    max_episode_tokens: int = 1024,
    max_time_s: float = 300.0,
    required_tool_turns: int = 1,
    tool_mode: Literal["native", "text"] = "native",
    instructions: str = DEFAULT_INSTRUCTIONS,
    n_ctx: int = 4096,
    n_threads: int | None = None,
) -> ToolCallingHarness:
    """SmolLM2-135M-Instruct (embedded GGUF, llama.cpp), in this process, with tools."""
    from envlab.models.weights import SMOLLM2_MODEL_ID, file_sha256, smollm2_path

    weights = file_sha256(smollm2_path())
    app = EmbeddedApp.shared(n_ctx, n_threads)
    sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens)

    def model() -> OpenAICompatModel:
        import httpx

        return OpenAICompatModel(
            SMOLLM2_NAME,
            IN_PROCESS_URL,
            sampling=sampling,
            logprobs=True,
            timeout_s=max_time_s,
            retry=RetryPolicy(max_retries=1),
            transport=httpx.ASGITransport(app=app),
        )

    return ToolCallingHarness(
        model,
        agent_name=SMOLLM2_NAME,
        model_id=SMOLLM2_MODEL_ID,
        endpoint="in-process: the envlab serve-model app over ASGI",
        weights_hash=weights,
        limits=_limits(max_turns, max_episode_tokens, max_time_s),
        settings=HarnessSettings(
            instructions=instructions,
            tool_mode=tool_mode,
            required_tool_turns=required_tool_turns,
            parallel_tool_calls=False,
        ),
    )


def parse_target(target: str) -> tuple[str, str]:
    """``MODEL@URL`` -> ``(MODEL, URL)``; without ``@URL``, ``$OPENAI_BASE_URL`` is the URL."""
    model, sep, url = target.partition("@")
    url = url if sep else os.environ.get("OPENAI_BASE_URL", "")
    if not model or not url:
        raise ConfigError(
            f"bad model target {target!r}: write openai:MODEL@URL, e.g. "
            "openai:smollm2@http://127.0.0.1:8000/v1 (or set OPENAI_BASE_URL and write "
            "openai:MODEL)"
        )
    return model, url


def openai(
    target: str,
    *,
    temperature: float | None = None,
    top_p: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    stop: list[str] | None = None,
    max_turns: int = 16,
    max_episode_tokens: int = 8192,
    max_time_s: float = 600.0,
    timeout_s: float = 120.0,
    max_retries: int = 4,
    backoff_s: float = 0.5,
    logprobs: bool = False,
    required_tool_turns: int = 0,
    parallel_tool_calls: bool | None = None,
    tool_mode: Literal["native", "text"] = "native",
    instructions: str = DEFAULT_INSTRUCTIONS,
    extra_body: dict[str, Any] | None = None,
    api_key_env: str = "OPENAI_API_KEY",
) -> ToolCallingHarness:
    """Any OpenAI-compatible endpoint: ``openai:MODEL@URL`` (API key from $OPENAI_API_KEY)."""
    model_name, url = parse_target(target)
    if tool_mode not in ("native", "text"):
        raise ConfigError(f"tool_mode must be 'native' or 'text', got {tool_mode!r}")
    sampling = Sampling(
        temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, stop=stop
    )
    retry = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s)

    def model() -> OpenAICompatModel:
        return OpenAICompatModel(
            model_name,
            url,
            api_key=os.environ.get(api_key_env) or None,
            sampling=sampling,
            timeout_s=timeout_s,
            retry=retry,
            logprobs=logprobs,
            extra_body=extra_body,
        )

    probe = model()
    return ToolCallingHarness(
        model,
        agent_name=f"openai:{model_name}",
        model_id=model_name,
        endpoint=probe.base_url,
        limits=_limits(max_turns, max_episode_tokens, max_time_s),
        settings=HarnessSettings(
            instructions=instructions,
            tool_mode=tool_mode,
            required_tool_turns=required_tool_turns,
            parallel_tool_calls=parallel_tool_calls,
        ),
    )
