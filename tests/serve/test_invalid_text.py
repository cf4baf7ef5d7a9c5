"""Text no encoder can write (a lone surrogate, sent as a JSON escape) through ``envlab serve``.

Before: a surrogate in a client's action reached the environment, and the frame that answered it
could not be encoded: the server dropped the connection, which a client counts as the
machinery's failure (``infra_error``, excluded): an agent could dodge its grade. Now the action
is refused as the agent's (a ``bad_request`` error frame, the session goes on), and an
environment's own invalid text is sent with U+FFFD in its place.
"""

from __future__ import annotations

import pytest

from envlab.core import Action, Observation, StepResult
from envlab.serve import wire
from tests.serve.conftest import frames, serving
from tests.support.envs import EchoEnv, EchoEpisode
from tests.support.play import echo_with

SURROGATE = "\\ud800"  # the JSON escape: what a raw client can put on the wire


@pytest.mark.parametrize(
    "action",
    [
        '{"text": "' + SURROGATE + '"}',
        '{"text": "", "tool_calls": [{"id": "c1", "name": "repeat", '
        '"arguments": {"text": "a' + SURROGATE + '"}}]}',
        '{"text": "", "tool_calls": [{"id": "c' + SURROGATE + '", "name": "repeat", '
        '"arguments": {"text": "a"}}]}',
    ],
    ids=["text", "argument", "id"],
)
def test_a_clients_invalid_text_is_its_bad_request_not_a_dropped_connection(action: str) -> None:
    with serving(EchoEnv()) as srv, frames(srv) as f:
        assert f.send({"type": "reset", "data": {}})["type"] == "observation"
        answer = f.send('{"type": "step", "data": ' + action + "}")
        assert answer["type"] == "error" and answer["data"]["code"] == wire.BAD_REQUEST
        message = answer["data"]["message"]
        assert "not valid Unicode" in message or "surrogate" in message, message
        # the session is still there: a valid action plays and is graded
        final = f.send({"type": "step", "data": {"text": "ok"}})
        assert final["type"] == "observation" and final["data"]["done"] is True


@pytest.mark.parametrize(
    "action",
    [
        '{"action": {"text": "' + SURROGATE + '"}}',
        '{"action": {"text": "", "tool_calls": [{"id": "c1", "name": "repeat", '
        '"arguments": {"text": "a' + SURROGATE + '"}}]}}',
    ],
    ids=["text", "argument"],
)
def test_the_same_over_http_episodes(action: str) -> None:
    import httpx

    with serving(EchoEnv()) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        r = client.post("/reset", json={})
        sid = r.headers[wire.SESSION_HEADER]
        headers = {wire.SESSION_HEADER: sid, "Content-Type": "application/json"}
        r = client.post("/step", content=action.encode(), headers=headers)
        assert r.status_code == 400, r.text
        assert "not valid Unicode" in r.text or "surrogate" in r.text
        r = client.post("/step", json={"action": {"text": "ok"}}, headers=headers)
        assert r.status_code == 200 and r.json()["done"] is True, r.text


class _Garbled(EchoEpisode):
    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        return StepResult(Observation(text="bad \ud800 text"), result.reward, result.done,
                          result.truncated, result.info)  # fmt: skip


def test_an_environments_invalid_text_is_sent_with_replacement_characters() -> None:
    with serving(echo_with(_Garbled)) as srv, frames(srv) as f:
        f.send({"type": "reset", "data": {}})
        final = f.send({"type": "step", "data": {"text": "ok"}})
        assert final["type"] == "observation", final
        assert "\ufffd" in final["data"]["observation"]["text"]
