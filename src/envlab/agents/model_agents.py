"""Agents backed by a real model: ``smollm2`` (embedded, in-process) and ``openai:MODEL@URL``.

Both return a ``ModelAgentFactory``: each episode's agent is a ``ToolCallingHarness`` over an
``OpenAICompatModel`` that borrows the run's one pooled HTTP client (``models.http.ModelHTTP``:
kept-alive connections, TLS set up once or, for ``http://``, not at all); ``aclose()`` closes
it when the run ends. ``smollm2`` sends its requests to the very app that ``envlab
serve-model`` serves, through ``httpx.ASGITransport`` instead of a socket: the same client,
the same routes, the same engine code as a remote endpoint. Which library runs the embedded
model (llama.cpp, or torch where it cannot be built) is ``models.local.engine_backend``'s
choice, fixed when the agent is made.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Literal

from envlab.agents.harness import (
    DEFAULT_INSTRUCTIONS,
    HarnessLimits,
    HarnessSettings,
    ToolCallingHarness,
)
from envlab.core import AgentFactory, AgentSpec, ConfigError, not_agent_time
from envlab.models.client import OpenAICompatModel, RetryPolicy, Sampling
from envlab.models.http import ModelHTTP

SMOLLM2_NAME = "smollm2"
IN_PROCESS_URL = "http://in-process.envlab/v1"
IN_PROCESS_ENDPOINT = "in-process: the envlab serve-model app over ASGI"


class EmbeddedApp:
    """The ``serve-model`` ASGI app for the embedded model, loaded on the first request.

    One per process and settings (``shared``): every episode's client talks to it, and the
    engine's queue makes concurrent episodes take turns at the model; neither loading the
    weights nor waiting in that queue is on an episode's clock (``core.clock``).
    """

    _instances: ClassVar[dict[tuple[str, int, int | None], EmbeddedApp]] = {}
    _guard: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, backend: str, n_ctx: int, n_threads: int | None) -> None:
        self.backend, self.n_ctx, self.n_threads = backend, n_ctx, n_threads
        self._app: Any = None
        self._load_lock = threading.Lock()

    @classmethod
    def shared(
        cls, n_ctx: int = 4096, n_threads: int | None = None, backend: str | None = None
    ) -> EmbeddedApp:
        """``backend``: the engine's (default: ``engine_backend()``, from ``$ENVLAB_ENGINE``)."""
        from envlab.models.local import engine_backend

        with cls._guard:
            key = (backend or engine_backend(), n_ctx, n_threads)
            if key not in cls._instances:
                cls._instances[key] = cls(*key)
            return cls._instances[key]

    def load(self) -> Any:
        with self._load_lock:
            if self._app is None:
                from envlab.models.local import shared_engine
                from envlab.models.server import create_app
                from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path

                engine = shared_engine(
                    smollm2_path(),
                    backend=self.backend,
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


class ModelAgentFactory(AgentFactory):
    """The agents of one model endpoint for a run: one ``ToolCallingHarness`` per episode, all
    over ONE pooled HTTP client (``ModelHTTP``).

    ``make_model(client)`` builds an episode's ``OpenAICompatModel`` over ``client`` (``None``
    only for the probe that fixes the spec, which sends nothing); ``make_client()`` builds the
    shared client, lazily, in the event loop that runs the episodes (a client is bound to its
    loop: a later run in a new loop gets a new one). ``aclose()`` closes it.
    """

    def __init__(
        self,
        make_model: Callable[[ModelHTTP | None], OpenAICompatModel],
        make_client: Callable[[], ModelHTTP],
        *,
        agent_name: str,
        model_id: str,
        endpoint: str,
        weights_hash: str | None = None,
        limits: HarnessLimits | None = None,
        settings: HarnessSettings | None = None,
    ) -> None:
        self._make_model, self._make_client = make_model, make_client
        self._harness: dict[str, Any] = dict(
            agent_name=agent_name,
            model_id=model_id,
            endpoint=endpoint,
            weights_hash=weights_hash,
            limits=limits,
            settings=settings,
        )
        self._spec = ToolCallingHarness(make_model(None), **self._harness).spec
        self._client: ModelHTTP | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def spec(self) -> AgentSpec:
        return self._spec

    def client(self) -> ModelHTTP:
        """The run's shared client, made on first use in the running event loop."""
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._client is None or (loop is not None and self._loop not in (None, loop)):
            # none yet, or the old one belongs to an earlier loop (whose connections died with it)
            self._client, self._loop = self._make_client(), loop
        elif self._loop is None:
            self._loop = loop
        return self._client

    def new_agent(self) -> ToolCallingHarness:
        return ToolCallingHarness(self._make_model(self.client()), **self._harness)

    async def aclose(self) -> None:
        """Close the shared client (call it in the loop that ran the episodes; a client whose
        loop has ended is dropped: its connections cannot be closed from another loop)."""
        client, loop = self._client, self._loop
        self._client = self._loop = None
        if client is not None and not (loop is not None and loop.is_closed()):
            await client.aclose()


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
) -> ModelAgentFactory:
    """SmolLM2-135M-Instruct (embedded GGUF; llama.cpp, else torch) in this process, with tools."""
    from envlab.models.local import require_local

    require_local("--agent smollm2")  # a missing extra is the user's setup, not the agent's failure
    from envlab.models.weights import SMOLLM2_MODEL_ID, file_sha256, smollm2_path

    weights = file_sha256(smollm2_path())
    app = EmbeddedApp.shared(n_ctx, n_threads)
    endpoint = IN_PROCESS_ENDPOINT  # llama.cpp's, as before the torch engine: its runs resume
    if app.backend != "llamacpp":
        endpoint += f" ({app.backend} engine)"
    sampling = Sampling(temperature=temperature, top_p=top_p, max_tokens=max_tokens)
    retry = RetryPolicy(max_retries=1)

    def model(client: ModelHTTP | None) -> OpenAICompatModel:
        return OpenAICompatModel(
            SMOLLM2_NAME,
            IN_PROCESS_URL,
            sampling=sampling,
            logprobs=True,
            timeout_s=max_time_s,
            retry=retry,
            client=client,
        )

    def client() -> ModelHTTP:
        import httpx

        transport = httpx.ASGITransport(app=app)
        return ModelHTTP(IN_PROCESS_URL, timeout_s=max_time_s, transport=transport)

    return ModelAgentFactory(
        model,
        client,
        agent_name=SMOLLM2_NAME,
        model_id=SMOLLM2_MODEL_ID,
        endpoint=endpoint,
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
    max_connections: int | None = None,
) -> ModelAgentFactory:
    """Any OpenAI-compatible endpoint: ``openai:MODEL@URL`` (API key from $OPENAI_API_KEY).

    ``max_connections`` caps the run's connection pool (default: one per request in flight)."""
    model_name, url = parse_target(target)
    if tool_mode not in ("native", "text"):
        raise ConfigError(f"tool_mode must be 'native' or 'text', got {tool_mode!r}")
    if max_connections is not None and max_connections < 1:
        raise ConfigError(f"max_connections must be >= 1 (or unset), got {max_connections}")
    sampling = Sampling(
        temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, stop=stop
    )
    retry = RetryPolicy(max_retries=max_retries, backoff_s=backoff_s)
    api_key = os.environ.get(api_key_env) or None

    def model(client: ModelHTTP | None) -> OpenAICompatModel:
        return OpenAICompatModel(
            model_name,
            url,
            sampling=sampling,
            timeout_s=timeout_s,
            retry=retry,
            logprobs=logprobs,
            extra_body=extra_body,
            client=client,
        )

    def client() -> ModelHTTP:
        return ModelHTTP(
            endpoint, api_key=api_key, timeout_s=timeout_s, max_connections=max_connections
        )

    endpoint = model(None).base_url
    return ModelAgentFactory(
        model,
        client,
        agent_name=f"openai:{model_name}",
        model_id=model_name,
        endpoint=endpoint,
        limits=_limits(max_turns, max_episode_tokens, max_time_s),
        settings=HarnessSettings(
            instructions=instructions,
            tool_mode=tool_mode,
            required_tool_turns=required_tool_turns,
            parallel_tool_calls=parallel_tool_calls,
        ),
    )
