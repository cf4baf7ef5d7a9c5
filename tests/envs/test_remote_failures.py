"""Whose failure is what on a remote environment: a server killed mid-episode, a refused
connection, a full server, a peer that breaks the protocol or sends a reward that is not valid.

The OpenEnv server is the real one (tests/fixtures/openenv_echo.py, in its own process where it
is killed); the protocol-breaking peer is a minimal raw websockets server written here, on
127.0.0.1, that answers the frames it is told to (a broken server, on purpose)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http import HTTPStatus
from typing import Any, ClassVar

import pytest

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    Observation,
    Status,
    Task,
    Trajectory,
)
from envlab.envs import load_env
from envlab.envs.remote import RemoteEnv
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes

pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from tests.fixtures import openenv_echo


async def play(
    spec: RemoteEnv, agent: AgentClass, tasks: list[Task], *, retries: int = 2
) -> list[Trajectory]:
    planned = [
        PlannedEpisode(
            task=t,
            sample_index=0,
            ids=episode_ids(spec.name, "h", t.id, 0, 0),
            agent=agent,
        )
        for t in tasks
    ]
    cfg = EpisodeConfig(max_retries=retries)
    return await run_episodes(spec, planned, config=cfg, concurrency=2)


class Reverser(Agent):
    """Solves the fixture from its prompt; ``before_first_act`` runs once, on its first act."""

    name = "reverser"
    hooks: ClassVar[list[Any]] = []

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="test:reverse")

    async def start(self, ctx: Any) -> None:
        self.word = ctx.prompt.split("'")[1]

    async def act(self, observation: Observation) -> Action:
        while Reverser.hooks:
            await asyncio.to_thread(Reverser.hooks.pop(0))
        return Action(text=self.word[::-1])


# --- a server killed mid-episode --------------------------------------------------------------
class Supervised:
    """The OpenEnv fixture server in its own process, started again whenever it dies."""

    def __init__(self) -> None:
        self.port = openenv_echo.free_port()
        self.proc = openenv_echo.start_process(self.port)
        self.starts = 1
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self.proc.poll() is not None and not self._stop.is_set():
                self.proc = openenv_echo.start_process(self.port)
                self.starts += 1
            self._stop.wait(0.05)

    def kill(self) -> None:
        pid = self.proc.pid
        os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def supervised() -> Iterator[Supervised]:
    s = Supervised()
    try:
        yield s
    finally:
        s.stop()


async def test_a_server_killed_mid_episode_is_infra_error_retried(supervised: Supervised) -> None:
    spec = load_env(f"ws://127.0.0.1:{supervised.port}", connect_timeout_s=90)
    task = spec.tasks()[0]
    Reverser.hooks = [supervised.kill]  # the first act, after the reset: mid-episode
    (t,) = await play(spec, AgentClass(Reverser), [task])
    assert supervised.starts == 2  # it was killed, and came back
    assert t.status is Status.OK and t.attempts == 2  # the killed attempt was retried
    assert t.reward == 1.0  # scored on the attempt that ran, never the dropped one's 0


async def test_a_server_gone_for_good_ends_as_infra_error_not_the_agents(
    supervised: Supervised,
) -> None:
    spec = load_env(f"ws://127.0.0.1:{supervised.port}", connect_timeout_s=0.5)
    task = spec.tasks()[0]
    supervised.stop()  # no restart this time
    (t,) = await play(spec, AgentClass(Reverser), [task], retries=1)
    assert t.status is Status.INFRA_ERROR and t.attempts == 2
    assert t.reward is None and t.error is not None and t.error.kind == "infra"
    assert "cannot connect" in t.error.message or "cannot reach" in t.error.message


async def test_a_server_that_stops_answering_is_infra_error_not_the_agents_timeout(
    supervised: Supervised,
) -> None:
    """A frozen server (SIGSTOP: the socket stays open, nothing answers) is caught by the
    keepalive before the agent's step timeout: the machinery's failure, not the agent's."""
    spec = load_env(f"ws://127.0.0.1:{supervised.port}", ping_interval_s=0.5, connect_timeout_s=0.5)
    task = spec.tasks()[0]
    pid = supervised.proc.pid
    Reverser.hooks = [lambda: os.kill(pid, signal.SIGSTOP)]
    try:
        (t,) = await play(spec, AgentClass(Reverser), [task], retries=0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert t.status is Status.INFRA_ERROR and t.error is not None
    assert t.error.kind == "infra" and t.error.phase == "step"


# --- a full server ----------------------------------------------------------------------------
@contextmanager
def held_session(url: str) -> Iterator[Any]:
    from websockets.sync.client import connect

    with connect(f"{url}/ws") as ws:
        ws.send(json.dumps({"type": "reset", "data": {}}))
        json.loads(ws.recv(timeout=10))
        yield ws


async def test_a_full_server_is_infra_error_naming_the_limit() -> None:
    with openenv_echo.serving(max_sessions=1) as url:
        spec = load_env(url, connect_timeout_s=0.3)
        task = spec.tasks()[0]
        with held_session(url):
            (t,) = await play(spec, AgentClass(Reverser), [task], retries=0)
        assert t.status is Status.INFRA_ERROR and t.error is not None
        assert "refused the session" in t.error.message and "--max-sessions" in t.error.message


async def test_a_full_server_is_waited_for_within_the_connect_timeout() -> None:
    with openenv_echo.serving(max_sessions=1) as url:
        spec = load_env(url, connect_timeout_s=60)
        task = spec.tasks()[0]
        with held_session(url) as ws:
            timer = threading.Timer(0.5, ws.close)
            timer.start()
            (t,) = await play(spec, AgentClass(Reverser), [task], retries=0)
            timer.join()
        assert t.status is Status.OK and t.reward == 1.0 and t.attempts == 1


# --- a peer that breaks the protocol ----------------------------------------------------------
SCHEMA = {"action": {"properties": {"message": {"type": "string"}}, "required": ["message"]}}


@asynccontextmanager
async def peer(answers: list[dict[str, Any] | str]) -> AsyncIterator[str]:
    """A raw websockets server: HTTP /schema and /metadata, then on /ws the reset's
    observation and ``answers`` to the steps, in order."""
    from websockets.asyncio.server import serve

    reset = {"type": "observation", "data": {"observation": {"prompt": "hi"}, "done": False}}

    def http(connection: Any, request: Any) -> Any:
        if request.path == "/schema":
            return connection.respond(HTTPStatus.OK, json.dumps(SCHEMA))
        if request.path == "/metadata":
            return connection.respond(HTTPStatus.OK, json.dumps({"name": "peer"}))
        if request.path != "/ws":
            return connection.respond(HTTPStatus.NOT_FOUND, "no")
        return None

    async def handler(ws: Any) -> None:
        script = list(answers)
        async for raw in ws:
            kind = json.loads(raw)["type"]
            if kind == "close":
                return
            out = reset if kind == "reset" else script.pop(0)
            await ws.send(out if isinstance(out, str) else json.dumps(out))

    async with serve(handler, "127.0.0.1", 0, process_request=http) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}"


def observation(reward: Any, done: bool) -> dict[str, Any]:
    return {
        "type": "observation",
        "data": {"observation": {"echoed": "x"}, "reward": reward, "done": done},
    }


async def run_on_peer(answers: list[dict[str, Any] | str], **config: Any) -> Trajectory:
    async with peer(answers) as url:
        spec = load_env(url, **config)
        task = (await asyncio.to_thread(spec.tasks))[0]  # HTTP to a peer on this loop
        agent = AgentClass(_Says, [Action(text="x")] * len(answers))
        (t,) = await play(spec, agent, [task], retries=0)
        return t


class _Says(Agent):
    name = "says"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="test:says")

    async def act(self, observation: Observation) -> Action:
        return self.actions.pop(0) if self.actions else Action(text="")


async def test_the_servers_infra_error_code_is_infra_error() -> None:
    err = {"type": "error", "data": {"code": "infra_error", "message": "sandbox did not start"}}
    t = await run_on_peer([err])
    assert t.status is Status.INFRA_ERROR and "sandbox did not start" in t.error.message  # type: ignore[union-attr]


async def test_a_frame_that_is_not_the_protocol_is_infra_error() -> None:
    for bad in ("not json", json.dumps([1, 2]), json.dumps({"type": "state", "data": {}})):
        t = await run_on_peer([bad])
        assert t.status is Status.INFRA_ERROR, bad


async def test_the_environment_raising_on_the_action_is_shown_to_the_agent() -> None:
    err = {"type": "error", "data": {"code": "EXECUTION_ERROR", "message": "bad word"}}
    t = await run_on_peer([err, observation(1.0, True)])
    assert t.status is Status.OK and t.tool_errors == 1 and t.reward == 1.0
    assert "bad word" in t.steps[0].observation.text


async def test_a_reward_outside_the_range_is_a_failed_grade_scored_zero() -> None:
    t = await run_on_peer([observation(5.0, True)])
    assert t.status is Status.OK and t.reward == 0.0 and t.grader_failed is not None
    assert "outside the reward range" in t.grader_failed
    t = await run_on_peer([observation("high", True)])
    assert t.reward == 0.0 and "not a finite number" in (t.grader_failed or "")
    t = await run_on_peer([observation(None, False), observation(None, True)])
    assert t.reward == 0.0 and "no reward" in (t.grader_failed or "")


async def test_a_declared_range_is_normalised_and_last_or_sum_chosen() -> None:
    frames = [observation(1.0, False), observation(3.0, True)]
    t = await run_on_peer(frames, reward_range=[0, 4])
    assert t.reward == 1.0 and t.grader_failed is None  # sum 4 of [0, 4]
    t = await run_on_peer(frames, reward_range=[0, 4], reward="last")
    assert t.reward == 0.75


def test_a_url_without_a_server_is_a_clear_config_error() -> None:
    from envlab.core import ConfigError

    port = openenv_echo.free_port()
    with pytest.raises(ConfigError, match="cannot reach the environment server"):
        load_env(f"ws://127.0.0.1:{port}").tasks()
    with pytest.raises(ConfigError, match="ws://"):
        RemoteEnv(url="http://127.0.0.1:1")
    with pytest.raises(ConfigError, match="once"):
        load_env("ws://127.0.0.1:1", url="ws://elsewhere:2")
