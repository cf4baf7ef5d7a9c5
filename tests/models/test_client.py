"""OpenAICompatModel against a scripted server over real HTTP: retries, backoff, failures."""

from __future__ import annotations

import asyncio
import contextlib
import random
import ssl
import time
from collections.abc import Iterator

import pytest

from envlab.core import (
    InfraError,
    ModelFailures,
    install_agent_clock,
    install_model_failures,
    reset_agent_clock,
    reset_model_failures,
)
from envlab.models.client import (
    ModelRequestError,
    OpenAICompatModel,
    RetryPolicy,
    Sampling,
    normalize_base_url,
    parse_retry_after,
)
from envlab.models.http import ModelHTTP
from tests.models.fake_openai import FakeOpenAI, Scripted, completion, dropped, error

FAST = RetryPolicy(max_retries=3, backoff_s=0.01, max_backoff_s=0.02)
MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
def fake():
    with FakeOpenAI() as f:
        yield f


async def test_reply_fields_and_request_body(fake: FakeOpenAI) -> None:
    fake.push(completion("hello", prompt_ids=[1, 2, 3], token_ids=[7, 8], logprobs=[-0.5, -0.25]))
    async with OpenAICompatModel(
        "m", fake.base_url, sampling=Sampling(temperature=0.2, max_tokens=9), logprobs=True
    ) as model:
        reply = await model.chat(MSGS, tools=[{"type": "function"}], tool_choice="required")
    assert reply.text == "hello"
    assert reply.prompt_ids == [1, 2, 3] and reply.completion_ids == [7, 8]
    assert reply.logprobs == [-0.5, -0.25]
    assert reply.finish_reason == "stop" and reply.attempts == 1
    body = fake.requests[0]
    assert body["model"] == "m" and body["temperature"] == 0.2 and body["max_tokens"] == 9
    assert body["logprobs"] is True and body["tool_choice"] == "required"


class RecordingClock:
    """An ``AgentClock`` that only records what the client reports to it (no deadlines)."""

    def __init__(self) -> None:
        self.pauses: list[str] = []
        self.credits: list[str] = []
        self.open = 0

    def pause(self, why: str) -> None:
        self.pauses.append(why)
        self.open += 1

    def resume(self) -> None:
        self.open -= 1

    def credit(self, seconds: float, why: str) -> None:
        self.credits.append(why)

    @property
    def waited_s(self) -> float:
        return 0.0


@contextlib.contextmanager
def recording(policy: ModelFailures = "exclude") -> Iterator[RecordingClock]:
    """A recording agent clock, in a run whose model failures are ``policy``."""
    clock = RecordingClock()
    token, p_token = install_agent_clock(clock), install_model_failures(policy)
    try:
        yield clock
    finally:
        reset_model_failures(p_token)
        reset_agent_clock(token)


async def test_429_then_success_honours_retry_after(fake: FakeOpenAI) -> None:
    fake.push(error(429, "slow down", {"Retry-After": "0.3"}), completion("ok"))
    with recording() as clock:
        async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
            reply = await model.chat(MSGS)
    assert reply.text == "ok" and reply.attempts == 2
    # the client waited what the server asked, as time that is not the agent's
    assert clock.pauses == ["model retry backoff 0.3s after HTTP 429: slow down"]
    assert clock.credits == ["failed model request"] and clock.open == 0


async def test_the_agents_own_endpoint_failing_is_on_its_clock(fake: FakeOpenAI) -> None:
    """By default the endpoint is the agent's (model + harness + operations): its refused tries
    and the waits they ask for are the agent's time, never credited."""
    fake.push(error(429, "slow down", {"Retry-After": "0.05"}), completion("ok"))
    with recording("agent") as clock:
        async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
            reply = await model.chat(MSGS)
    assert reply.text == "ok" and reply.attempts == 2
    assert clock.pauses == [] and clock.credits == []


async def test_a_timed_out_try_is_not_credited() -> None:
    """A model too slow to answer may be the agent's own slowness: only the backoff is paused."""
    import socket

    with (
        recording() as clock,
        socket.socket() as s,
    ):  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        async with OpenAICompatModel(
            "m", url, timeout_s=0.2, retry=RetryPolicy(max_retries=1, backoff_s=0.01)
        ) as model:
            with pytest.raises(InfraError, match="timed out"):
                await model.chat(MSGS)
    assert clock.credits == [] and len(clock.pauses) == 1 and clock.open == 0


async def test_500s_until_retries_run_out_raise_infra_error(fake: FakeOpenAI) -> None:
    fake.push(*[error(500, "boom")] * 4)
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        with pytest.raises(InfraError, match=r"failed 4 times.*HTTP 500: boom"):
            await model.chat(MSGS)
    assert len(fake.requests) == 4


async def test_dropped_connection_is_retried(fake: FakeOpenAI) -> None:
    fake.push(dropped(), completion("after the drop"))
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        reply = await model.chat(MSGS)
    assert reply.text == "after the drop" and reply.attempts == 2


async def test_dropped_every_time_is_infra_error(fake: FakeOpenAI) -> None:
    fake.push(*[dropped()] * 4)
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        with pytest.raises(InfraError, match=r"RemoteProtocolError|ReadError|disconnected"):
            await model.chat(MSGS)


async def test_connection_refused_is_infra_error() -> None:
    from envlab.models.server import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    async with OpenAICompatModel("m", url, retry=FAST) as model:
        with pytest.raises(InfraError, match="ConnectError"):
            await model.chat(MSGS)


async def test_timeout_is_retried_then_infra_error(fake: FakeOpenAI) -> None:
    import socket

    with socket.socket() as s:  # accepts connections (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        async with OpenAICompatModel(
            "m", url, timeout_s=0.2, retry=RetryPolicy(max_retries=1, backoff_s=0.01)
        ) as model:
            with pytest.raises(InfraError, match="timed out"):
                await model.chat(MSGS)


async def test_not_a_completion_is_retried(fake: FakeOpenAI) -> None:
    fake.push(Scripted(body={"unexpected": True}), completion("fine"))
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        reply = await model.chat(MSGS)
    assert reply.text == "fine" and reply.attempts == 2


async def test_refused_request_is_not_retried(fake: FakeOpenAI) -> None:
    fake.push(error(400, "prompt too long"))
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        with pytest.raises(ModelRequestError, match="HTTP 400: prompt too long") as info:
            await model.chat(MSGS)
    assert info.value.status == 400 and len(fake.requests) == 1


@pytest.mark.parametrize("status", [401, 403, 404])
async def test_wrong_key_or_model_is_infrastructure_not_the_agent(
    fake: FakeOpenAI, status: int
) -> None:
    fake.push(error(status, "no such model or key"))
    async with OpenAICompatModel("m", fake.base_url, retry=FAST) as model:
        with pytest.raises(InfraError, match=f"HTTP {status}.*Check the model name"):
            await model.chat(MSGS)
    assert len(fake.requests) == 1  # not retried inside the client


def test_backoff_grows_with_jitter_and_caps() -> None:
    policy = RetryPolicy(backoff_s=1.0, max_backoff_s=4.0, max_retry_after_s=10.0)
    rng = random.Random(0)
    first = [policy.delay(1, None, rng) for _ in range(50)]
    assert all(0.5 <= d <= 1.0 for d in first) and len(set(first)) > 1
    assert all(2.0 <= policy.delay(5, None, rng) <= 4.0 for _ in range(50))
    assert policy.delay(1, 3.0, rng) == 3.0
    assert policy.delay(1, 99.0, rng) == 10.0


def test_retry_after_formats() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (parse_retry_after(when) or 0) <= 31


def test_base_url_normalized() -> None:
    assert normalize_base_url("http://h:1") == "http://h:1/v1"
    assert normalize_base_url("h:1/") == "http://h:1/v1"
    assert normalize_base_url("https://api.x.com/openai/v1/") == "https://api.x.com/openai/v1"


async def test_a_borrowed_client_is_shared_and_left_open(fake: FakeOpenAI) -> None:
    fake.push(completion("one"), completion("two"))
    shared = ModelHTTP(fake.base_url)
    async with shared:
        for text in ("one", "two"):
            model = OpenAICompatModel("m", fake.base_url, client=shared)
            assert model.borrows_client
            assert (await model.chat(MSGS)).text == text
            await model.aclose()
            assert not shared.closed  # the next episode's model uses it too
    # the second request reused the kept-alive connection
    assert len(fake.connections) == 1
    with pytest.raises(ValueError, match="client="):
        OpenAICompatModel("m", fake.base_url, client=shared, api_key="sk")


async def test_an_owned_client_is_closed_by_aclose(fake: FakeOpenAI) -> None:
    fake.push(completion("hi"))
    model = OpenAICompatModel("m", fake.base_url, api_key="sk-own")
    assert not model.borrows_client
    await model.chat(MSGS)
    client = model._http()
    await model.aclose()
    assert client.closed


@contextlib.contextmanager
def ca_bundle_loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[object]]:
    """Every CA bundle an ``ssl.SSLContext`` loads while installed."""
    loads: list[object] = []
    real = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args or kwargs)
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    yield loads


async def test_plain_http_sets_up_no_tls_and_https_keeps_verification(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    with ca_bundle_loads(monkeypatch) as loads:
        fake.push(completion("hi"))
        async with OpenAICompatModel("m", fake.base_url) as model:
            assert (await model.chat(MSGS)).text == "hi"
        assert loads == []  # no CA bundle read for a plain-http endpoint
        secure = ModelHTTP("https://api.example.com/v1", api_key="sk")
        assert loads, "https verifies certificates: the CA bundle is loaded"
        await secure.aclose()


async def test_a_connection_the_server_closed_while_idle_is_replaced(fake: FakeOpenAI) -> None:
    closing = completion("first")
    closing.close_after = True
    fake.push(closing, completion("second"))
    async with OpenAICompatModel("m", fake.base_url, retry=RetryPolicy(max_retries=0)) as model:
        assert (await model.chat(MSGS)).text == "first"
        assert await asyncio.to_thread(fake.closed_after.wait, 30)
        reply = await model.chat(MSGS)  # not a failed try: a fresh connection
    assert reply.text == "second" and reply.attempts == 1
    assert len(fake.connections) == 2


async def test_connection_close_from_the_server_is_honoured(fake: FakeOpenAI) -> None:
    fake.push(Scripted(body=completion("a").body, headers={"Connection": "close"}), completion("b"))
    async with OpenAICompatModel("m", fake.base_url, retry=RetryPolicy(max_retries=0)) as model:
        assert [(await model.chat(MSGS)).text for _ in range(2)] == ["a", "b"]
    assert len(fake.connections) == 2


async def test_an_endpoint_behind_a_proxy_from_the_environment_goes_through_it(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", fake.base_url.removesuffix("/v1"))
    fake.push(completion("via proxy"))
    async with OpenAICompatModel("m", "http://model.invalid:8000/v1") as model:
        assert (await model.chat(MSGS)).text == "via proxy"
    assert fake.requests[0]["model"] == "m"


class _EndlessReply:
    """A real server on 127.0.0.1 that answers every request with a body that never ends
    (chunked, 64 KiB chunks until the client hangs up), or with a ``Content-Length`` far over
    any cap: an agent's own model endpoint trying to fill the runner's memory."""

    def __init__(self, declared: bool) -> None:
        import socket
        import threading

        self.declared = declared
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                head = (
                    "Content-Length: 10000000000" if self.declared else "Transfer-Encoding: chunked"
                )
                conn.sendall(
                    f"HTTP/1.1 200 OK\r\n{head}\r\nContent-Type: application/json\r\n\r\n".encode()
                )
                chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
                try:
                    while self.sent < 1 << 30:  # 1 GiB at most, whatever the client does
                        conn.sendall(chunk)
                        self.sent += len(chunk)
                except OSError:
                    continue

    def close(self) -> None:
        self.sock.close()


@pytest.mark.parametrize("declared", [False, True], ids=["chunked-forever", "content-length"])
async def test_a_reply_that_never_ends_is_refused_at_the_cap(declared: bool) -> None:
    from envlab.models.http import TransportError

    server = _EndlessReply(declared)
    try:
        async with ModelHTTP(server.base_url, max_reply_bytes=1 << 20) as client:
            with pytest.raises(TransportError, match=r"more than|over"):
                url = f"{server.base_url}/chat/completions"
                await client.request("POST", url, json_body=b"{}")
        async with OpenAICompatModel("m", server.base_url, retry=FAST) as model:
            model._http().max_reply_bytes = 1 << 20
            with pytest.raises(InfraError, match=r"more than|over"):
                await model.chat(MSGS)  # the agent's model failure, once retries run out
    finally:
        server.close()
    assert server.sent < 64 << 20  # the client hung up near the cap, not at the server's end
