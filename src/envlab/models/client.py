"""``OpenAICompatModel``: any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp, hosted
APIs, ``envlab serve-model``), async, over one pooled ``models.http.ModelHTTP`` per endpoint.

What can go wrong, and what the client does:

- transport (connection refused or dropped, timeout) and overload (HTTP 408, 429, 5xx) and a
  reply that is not a chat completion (malformed JSON, lone surrogates, no choices) are retried
  with exponential backoff and jitter, honouring ``Retry-After`` (bounded by ``RetryPolicy``);
  when the retries run out, ``ModelUnavailable``;
- a wrong key, model name or URL (HTTP 401, 403, 404): ``ModelUnavailable`` at once;
- a request the server refuses otherwise (other 4xx: a prompt too long, bad settings) raises
  ``ModelRequestError``;
- whatever the model writes, however wrong, is returned as it is: the harness decides.

Whose failure a ``ModelUnavailable`` is, the engine decides, once (``rollout.episode``): the
agent is model + harness + operations, so its endpoint failing is its failure (``agent_error``,
error kind ``model``, scored 0) unless the run drives a trusted endpoint of its own and excludes
model failures (``core.clock.ModelFailures``). The time follows the same rule: in a run that
excludes model failures, the backoff between tries and the time of a failed try are not the
agent's (``core.clock``); otherwise they are on its clock, so an endpoint cannot stretch an
episode past the machinery's wait limit and have it excluded.

One pooled HTTP client (``models.http.ModelHTTP``) serves every episode of a run: a model given
``client=`` borrows it and never closes it; its owner (``agents.model_agents.ModelAgentFactory``)
does, when the run ends.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from envlab.core import (
    EnvlabError,
    ModelUnavailable,
    credit_not_agent_time,
    model_failures,
    not_agent_time,
)
from envlab.models.http import ModelHTTP, Reply, RequestTimeout, TransportError
from envlab.models.wire import ChatResponse, WireToolCall

if TYPE_CHECKING:
    import httpx

RETRY_STATUS = frozenset({408, 409, 425, 429})


class ModelRequestError(EnvlabError):
    """The server refused the request (HTTP 4xx other than 408/409/425/429); retrying won't help."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings sent with every request (``None``: the server's default)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__ if getattr(self, k) is not None}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry a failed request."""

    max_retries: int = 4
    backoff_s: float = 0.5
    """The first delay; it doubles each retry, with jitter (half fixed, half random)."""
    max_backoff_s: float = 8.0
    max_retry_after_s: float = 60.0
    """The longest ``Retry-After`` honoured; a longer one is cut to this."""

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after_s)
        cap = min(self.max_backoff_s, self.backoff_s * 2 ** (retry - 1))
        return cap / 2 + rng.uniform(0, cap / 2)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a ``Retry-After`` header (a number or an HTTP date); None if absent or bad."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


@dataclass(slots=True)
class ModelReply:
    """One model reply: what it wrote, and token-level data when the server sent it."""

    text: str
    tool_calls: list[WireToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    """One per completion token when the server returned logprobs."""
    model: str = ""
    attempts: int = 1
    latency_s: float = 0.0

    @classmethod
    def from_response(cls, resp: ChatResponse) -> ModelReply:
        choice = resp.choices[0]
        lps = None
        if choice.logprobs is not None and choice.logprobs.content is not None:
            lps = [float(t.logprob) for t in choice.logprobs.content]
        prompt_ids = resp.prompt_token_ids
        if prompt_ids is None:  # some servers put it on the choice
            extra = (choice.model_extra or {}).get("prompt_token_ids")
            prompt_ids = list(extra) if isinstance(extra, list) else None
        usage = (
            resp.usage.model_dump(include={"prompt_tokens", "completion_tokens"})
            if (resp.usage)
            else {}
        )
        return cls(
            text=choice.message.content or "",
            tool_calls=list(choice.message.tool_calls or []),
            finish_reason=choice.finish_reason,
            usage=usage,
            prompt_ids=prompt_ids,
            completion_ids=choice.token_ids,
            logprobs=lps,
            model=resp.model,
        )


@functools.lru_cache(maxsize=256)
def normalize_base_url(url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1``; a URL with a path is kept as it is."""
    url = url.rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if urlsplit(url).path in ("", "/"):
        url += "/v1"
    return url


class OpenAICompatModel:
    """A chat model behind ``{base_url}/chat/completions``.

    With ``client`` (a ``ModelHTTP``) the model borrows that client: it carries the API key and
    the transport, and ``aclose()`` leaves it open for the other episodes that share it.
    Without, the model makes its own on first use (``api_key``, ``transport``; e.g.
    ``httpx.ASGITransport(app)`` to call an app in this process) and ``aclose()`` closes it.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        sampling: Sampling | None = None,
        timeout_s: float = 120.0,
        connect_timeout_s: float = 10.0,
        retry: RetryPolicy | None = None,
        logprobs: bool = False,
        extra_body: dict[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        client: ModelHTTP | None = None,
        seed: int | None = None,
    ) -> None:
        if client is not None and (api_key is not None or transport is not None):
            raise ValueError(
                "give either client= (which carries the API key and transport: make it with "
                "ModelHTTP(url, api_key=..., transport=...)) or api_key/transport, not both"
            )
        self.model = model
        self.base_url = normalize_base_url(base_url)
        self.api_key = api_key
        self.sampling = sampling or Sampling()
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.retry = retry or RetryPolicy()
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self._transport = transport
        self._client = client
        self._owns_client = client is None
        self._seed = seed
        self._rng: random.Random | None = None  # made on the first retry

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    @property
    def borrows_client(self) -> bool:
        """True when the HTTP client was given (shared), not made (and closed) here."""
        return not self._owns_client

    def _http(self) -> ModelHTTP:
        if self._client is None:
            self._client = ModelHTTP(
                self.base_url,
                api_key=self.api_key,
                timeout_s=self.timeout_s,
                connect_timeout_s=self.connect_timeout_s,
                transport=self._transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client if this model made it; a borrowed one stays open."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> OpenAICompatModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def request_body(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        body.update(self.sampling.to_dict())
        body.update({k: v for k, v in overrides.items() if v is not None})
        if tools:
            body["tools"] = tools
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
            if parallel_tool_calls is not None:
                body["parallel_tool_calls"] = parallel_tool_calls
        if self.logprobs:
            body["logprobs"] = True
        body.update(self.extra_body)
        return body

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
        parallel_tool_calls: bool | None = None,
        timeout_s: float | None = None,
        **overrides: Any,
    ) -> ModelReply:
        """One completion. ``overrides`` replace sampling settings for this call (None: keep)."""
        body = self.request_body(
            messages,
            tools=tools,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
            **overrides,
        )
        timeout = timeout_s or self.timeout_s
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        payload = data.encode()
        client = self._http()
        history: list[str] = []
        t0 = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            tried: float | None = time.perf_counter()
            try:
                resp = await client.request("POST", self.url, json_body=payload, timeout_s=timeout)
            except RequestTimeout as e:
                history.append(f"timed out ({e}; limit {timeout}s)")
                tried = None  # a model too slow to answer may be the agent's own slowness
            except TransportError as e:
                history.append(str(e) or "connection failed")
            else:
                if resp.status_code == 200:
                    reply = self._parse(resp, history)
                    if reply is not None:
                        reply.attempts = attempt
                        reply.latency_s = time.perf_counter() - t0
                        return reply
                elif resp.status_code in RETRY_STATUS or resp.status_code >= 500:
                    retry_after = parse_retry_after(resp.headers.get("retry-after"))
                    history.append(f"HTTP {resp.status_code}: {_error_text(resp)}")
                elif resp.status_code in (401, 403, 404):  # a wrong key, model name or URL
                    raise ModelUnavailable(
                        f"{self.url} refused the request with HTTP {resp.status_code}: "
                        f"{_error_text(resp)}. Check the model name ({self.model!r}), the "
                        "endpoint URL and the API key (OPENAI_API_KEY)."
                    )
                else:
                    raise ModelRequestError(
                        f"{self.url} refused the request with HTTP {resp.status_code}: "
                        f"{_error_text(resp)}. Check the model name ({self.model!r}), the API "
                        "key (OPENAI_API_KEY) and the request settings.",
                        resp.status_code,
                    )
            if attempt > self.retry.max_retries:
                raise ModelUnavailable(
                    f"model server {self.url} failed {attempt} times in "
                    f"{time.perf_counter() - t0:.1f}s; last: {history[-1]}"
                    + (f" (earlier: {'; '.join(history[-4:-1])})" if len(history) > 1 else "")
                    + ". Check that the server is up and reachable (envlab serve-model for the "
                    "built-in one), or raise the agent's max_retries/timeout_s."
                )
            await self._back_off(attempt, retry_after, tried, history[-1])

    async def _back_off(
        self, attempt: int, retry_after: float | None, tried: float | None, last: str
    ) -> None:
        """Wait before the next try. In a run that excludes model failures, the failed try and
        the wait are the endpoint's time, not the agent's; otherwise they are the agent's."""
        if self._rng is None:
            self._rng = random.Random(self._seed)
        delay = self.retry.delay(attempt, retry_after, self._rng)
        if model_failures() != "exclude":
            await asyncio.sleep(delay)
            return
        if tried is not None:
            credit_not_agent_time(time.perf_counter() - tried, "failed model request")
        async with not_agent_time(f"model retry backoff {delay:.3g}s after {last[:80]}"):
            await asyncio.sleep(delay)

    def _parse(self, resp: Reply, history: list[str]) -> ModelReply | None:
        try:
            parsed = ChatResponse.model_validate_json(resp.content)
        except ValidationError as e:
            history.append(
                f"HTTP 200 but not a chat completion ({_first_error(e)}): {resp.text[:200]!r}"
            )
            return None
        if not parsed.choices:
            history.append("HTTP 200 with no choices")
            return None
        return ModelReply.from_response(parsed)

    async def models(self) -> list[str]:
        """Model ids the server lists at ``/models`` (one try; errors as ``ModelUnavailable``)."""
        try:
            resp = await self._http().request("GET", f"{self.base_url}/models")
            if resp.status_code != 200:
                raise ValueError(f"HTTP {resp.status_code}: {_error_text(resp)}")
            return [str(m["id"]) for m in resp.json().get("data", [])]
        except (TransportError, ValueError, KeyError, TypeError) as e:
            raise ModelUnavailable(f"cannot list models at {self.base_url}/models: {e}") from e


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}"


def _error_text(resp: Reply) -> str:
    try:
        data = resp.json()
        err = data.get("error") if isinstance(data, dict) else None
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:300]
    except ValueError:
        pass
    return resp.text[:300] or "(empty body)"
