"""One episode of a ``RemoteEnv``: one ``/ws`` connection, OpenEnv's frames.

Whose failure is what (docs/remote.md): a refused or dropped connection, a session the server
refused (its ``--max-sessions``), a frame that is not the protocol, and the server's own
``infra_error`` are the machinery's (``InfraError``: retried, never scored). An error frame
answering the agent's action (malformed, refused by the action schema, or the environment
raising on it) is shown to the agent as a tool error and counted: the agent may have caused it.
The reward comes only from the server's frames: envlab's graded reward on the frame that ends
the episode, or a plain OpenEnv server's ``reward`` values; nothing the agent writes is read
for a reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any

from envlab.core import (
    Action,
    ConfigError,
    Environment,
    EnvlabError,
    EpisodeTimeExceeded,
    GraderFailed,
    InfraError,
    Observation,
    Reward,
    StepResult,
    Task,
    ToolCallError,
    ToolResult,
    ToolSpec,
)
from envlab.envs.remote_budget import FrameBudget
from envlab.envs.remote_openenv import ActionShape, observation_text, remote_tool
from envlab.serve import wire

if TYPE_CHECKING:
    from envlab.envs.remote import RemoteEnv

CAPACITY_CODES = frozenset({wire.CAPACITY, "CAPACITY_REACHED"})
INFRA_CODES = frozenset({wire.INFRA_ERROR, "FACTORY_ERROR", "SESSION_ERROR"})
ACTION_CODES = frozenset(
    {wire.BAD_REQUEST, "VALIDATION_ERROR", "INVALID_JSON", "UNKNOWN_TYPE", "EXECUTION_ERROR"}
)
"""Error frames that answer the agent's action: shown to it, counted, never excluded."""
NOT_RUN = "not run: the episode ended"
CLOSE_TIMEOUT_S = 2.0
"""Seconds to wait for the server's side of a closing handshake (a dead peer never answers)."""


class RemoteEnvError(EnvlabError):
    """The remote environment raised (``env_error``), or refused the reset this client sent."""


class _Refused(Exception):
    """An error frame answering the agent's action (its message is shown to the agent)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"the server refused the action ({code}): {message}")


class RemoteEpisode(Environment):
    """One episode on the server of a ``RemoteEnv`` (one WebSocket session)."""

    def __init__(self, spec: RemoteEnv) -> None:
        self.spec = spec
        self._ws: Any = None
        self._envlab = False
        self._shape: ActionShape | None = None
        self._tools: list[ToolSpec] = []
        self._system: str | None = None
        self._final: wire.StepData | None = None
        self._rewards: list[float] = []
        self._server_steps = 0
        self._done = False
        self._snapshot: dict[str, Any] = {}
        self._budget = FrameBudget(spec.config.max_stored_bytes)

    # --- the episode --------------------------------------------------------------------------
    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        from envlab.envs.remote import ServerUnreachable

        try:
            info = await asyncio.to_thread(self.spec.server)
        except ServerUnreachable as e:
            raise InfraError(str(e)) from None
        self._envlab = info.envlab
        ref = dict(task.metadata.get("remote_task") or {})
        if not self._envlab:
            ref.pop("task_seed", None)
        frame = wire.reset_frame(seed=seed, **ref)
        data = await self._open(frame)
        self._snapshot = {
            "task_id": task.id,
            "reset": self._budget.keep(_without_ids(data), "the reset frame"),
        }
        if self._envlab:
            first = self._read(data)
            self._tools = [remote_tool(t) for t in first.observation.tools]
            self._system = first.observation.system_prompt
            return wire.observation_from_wire(first.observation)
        name = info.env_name or str(info.metadata.get("name") or "remote")
        self._shape = ActionShape.of(
            info.action_schema, name, str(info.metadata.get("description") or "")
        )
        self._tools = [self._shape.tool]
        return Observation(text=observation_text(data.get("observation", {})))

    async def step(self, action: Action) -> StepResult:
        if self._envlab:
            return await self._step_envlab(action)
        return await self._step_openenv(action)

    async def _step_envlab(self, action: Action) -> StepResult:
        try:
            data = await self._exchange(wire.step_frame(action), "step")
        except _Refused as e:
            return _refusal(action, str(e))
        sd = self._read(data)
        obs = wire.observation_from_wire(sd.observation)
        info = self._budget.keep(dict(sd.observation.info), "a step's info")
        errors = info.get("tool_errors", 0)
        info["tool_errors"] = errors if type(errors) is int and errors >= 0 else 0
        if sd.done:
            self._done, self._final = True, sd
            return StepResult(
                obs, 0.0, not sd.observation.truncated, sd.observation.truncated, info
            )
        return StepResult(obs, _number(sd.reward), False, False, info)

    async def _step_openenv(self, action: Action) -> StepResult:
        assert self._shape is not None
        if not action.tool_calls:
            if not action.text:  # the agent stopped: nothing to send
                self._done = True
                return StepResult(Observation(), 0.0, done=True, info={"agent_stopped": True})
            try:
                result = await self._server_step(self._shape.action_of_text(action.text))
            except (ToolCallError, _Refused) as e:
                return StepResult(Observation(text=f"Error: {e}"), info={"tool_errors": 1})
            obs_text, reward, done = result
            return StepResult(Observation(text=obs_text), reward, done=done)
        results: list[ToolResult] = []
        total, errors = 0.0, 0
        for call in action.tool_calls:
            if self._done:
                results.append(
                    ToolResult(call.id, call.name, "Error: not run: the episode ended", True)
                )
                errors += 1
                continue
            try:
                obs_text, reward, _ = await self._server_step(
                    self._shape.action_of_call(call.name, call.arguments)
                )
            except (ToolCallError, _Refused) as e:
                results.append(ToolResult(call.id, call.name, f"Error: {e}", True))
                errors += 1
                continue
            total += reward
            results.append(ToolResult(call.id, call.name, obs_text))
        obs = Observation(tool_results=results)
        return StepResult(obs, total, done=self._done, info={"tool_errors": errors})

    async def _server_step(self, action: dict[str, Any]) -> tuple[str, float, bool]:
        data = await self._exchange({"type": "step", "data": action}, "step")
        self._server_steps += 1
        reward = data.get("reward")
        if reward is not None:
            self._rewards.append(_number(reward))
        self._done = bool(data.get("done", False))
        text = observation_text(data.get("observation", {}))
        return (
            (f"{text}\n(the episode is over)" if self._done else text),
            _number(reward),
            self._done,
        )

    def state(self) -> dict[str, Any]:
        cut = {"cut": list(self._budget.notes)} if self._budget.notes else {}
        return {**self._snapshot, "server_steps": self._server_steps, "done": self._done, **cut}

    async def grade(self) -> Reward | None:
        """The server's reward: envlab's graded reward (or its grader's failure), or a plain
        OpenEnv server's frame rewards (``reward: sum|last``). Only the server's frames."""
        if self._envlab:
            final = self._final
            if final is None:
                raise GraderFailed(
                    "the episode ended on this side (a limit or a timeout here) before the "
                    "server ended it, so the server never graded it; envlab's server grades "
                    "the frame that ends the episode (leave --max-steps to the server)"
                )
            if final.grader_failed is not None:
                raise GraderFailed(f"the server's grader failed: {final.grader_failed}")
            graded = final.graded
            if graded is None:
                raise GraderFailed("the server ended the episode without a graded reward")
            return Reward(
                total=graded.total,
                components=graded.components,
                gated_by=graded.gated_by,
                details=self._budget.keep(graded.details or {}, "the grade's details"),
            )
        if not self._rewards:
            if self._server_steps == 0:  # the agent did nothing: nothing earned
                return Reward(total=0.0, details={"from": "no action sent"})
            raise GraderFailed(
                f"the server sent no reward in {self._server_steps} step frames (every "
                "'reward' was null)"
            )
        how = self.spec.config.reward
        total = sum(self._rewards) if how == "sum" else self._rewards[-1]
        return Reward(total=total, details={"from": f"server rewards ({how})"})

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.send(json.dumps(wire.close_frame())), CLOSE_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(), CLOSE_TIMEOUT_S)

    @property
    def tools(self) -> list[ToolSpec]:
        return self._tools

    def system_prompt(self) -> str | None:
        return self._system

    def oracle_actions(self, task: Task) -> list[Action]:
        if task.answer is None:  # the server keeps its answers: nothing to replay
            return []
        if self._envlab or (self._shape is not None and self._shape.text_field is not None):
            return [Action(text=str(task.answer))]
        return [Action(text=json.dumps(task.answer, default=str))]

    # --- the connection -----------------------------------------------------------------------
    async def _open(self, reset: dict[str, Any]) -> dict[str, Any]:
        """Connect and reset; a refused connection or session is tried again (a server
        restarting, all its sessions taken) for ``connect_timeout_s``, then ``InfraError``."""
        loop = asyncio.get_running_loop()
        cfg = self.spec.config
        deadline = loop.time() + cfg.connect_timeout_s
        delay = 0.1
        while True:
            try:
                await self._connect(max(0.5, deadline - loop.time()))
                return await self._exchange(reset, "reset")
            except _Busy as e:
                last: InfraError = e
            except InfraError as e:
                if self._ws is not None:  # connected, then dropped: not a restart to wait out
                    raise
                last = e
            await self.close()
            if loop.time() + delay > deadline:
                raise InfraError(f"{last} (tried for {cfg.connect_timeout_s:g}s)") from None
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _connect(self, timeout: float) -> None:
        import websockets

        cfg = self.spec.config
        try:
            self._ws = await websockets.connect(
                self.spec.ws_url,
                open_timeout=timeout,
                max_size=cfg.max_frame_bytes,
                ping_interval=cfg.ping_interval_s,
                ping_timeout=cfg.ping_interval_s,
                close_timeout=CLOSE_TIMEOUT_S,
                compression=None,
            )
        except websockets.exceptions.InvalidURI as e:
            raise ConfigError(f"bad environment URL {self.spec.ws_url!r}: {e}") from None
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as e:
            raise InfraError(
                f"cannot connect to the environment server at {self.spec.ws_url}: "
                f"{type(e).__name__}: {e}"
            ) from None

    async def _exchange(self, frame: dict[str, Any], phase: str) -> dict[str, Any]:
        """Send ``frame``, return the data of the observation frame that answers it."""
        from websockets.exceptions import ConnectionClosed

        ws = self._ws
        if ws is None:
            raise InfraError(f"no connection to {self.spec.ws_url} ({phase})")
        with contextlib.suppress(ConnectionClosed):  # a refusal may already wait to be read
            await ws.send(json.dumps(frame))
        try:
            raw = await ws.recv()
        except ConnectionClosed as e:
            raise InfraError(
                f"the environment server at {self.spec.ws_url} closed the connection during "
                f"{phase} ({e}); the episode is retried"
            ) from None
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            answer = None
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), dict):
            raise InfraError(f"the server answered {phase} with a frame that is not OpenEnv's")
        kind, data = answer.get("type"), answer["data"]
        if kind == "error":
            raise self._error(data, phase)
        if kind != "observation":
            raise InfraError(f"the server answered {phase} with a {kind!r} frame")
        return data

    def _error(self, data: dict[str, Any], phase: str) -> Exception:
        code, message = str(data.get("code", "")), str(data.get("message", ""))[:2000]
        where = f"the environment server at {self.spec.ws_url}"
        if code in CAPACITY_CODES:
            return _Busy(
                f"{where} refused the session: {message} (all its sessions are taken: start it "
                "with a larger --max-sessions, or run fewer episodes at once with --concurrency)"
            )
        if code in INFRA_CODES:
            return InfraError(f"{where} failed during {phase} ({code}): {message}")
        if code == wire.IDLE_TIMEOUT:  # this side (the agent) was silent: its time, scored
            return EpisodeTimeExceeded(
                f"{where} closed the session: no frame came within its --idle-timeout ({message})"
            )
        if phase == "step" and code in ACTION_CODES:
            return _Refused(code, message)
        if code == wire.ENV_ERROR or code == "EXECUTION_ERROR" or phase == "reset":
            return RemoteEnvError(
                f"{where}: the environment failed during {phase} ({code}): {message}"
            )
        return InfraError(f"{where} answered {phase} with error {code!r}: {message}")

    def _read(self, data: dict[str, Any]) -> wire.StepData:
        try:
            return wire.step_from_wire(data)
        except wire.WireError as e:
            raise InfraError(f"{e} (is the server envlab's? set --env-arg mode=openenv)") from None


class _Busy(InfraError):
    """The server refused the session: it holds as many as it may."""


def _refusal(action: Action, message: str) -> StepResult:
    if not action.tool_calls:
        return StepResult(Observation(text=f"Error: {message}"), info={"tool_errors": 1})
    results = [ToolResult(c.id, c.name, f"Error: {message}", True) for c in action.tool_calls]
    return StepResult(Observation(tool_results=results), info={"tool_errors": len(results)})


def _number(value: Any) -> float:
    """A frame's reward as a float: ``None`` is 0 for a step; anything not a number is NaN,
    which the grade refuses (``GraderFailed``: a reward is never guessed)."""
    if value is None:
        return 0.0
    if isinstance(value, bool | int | float):
        return float(value)
    return float("nan")


def _without_ids(data: dict[str, Any]) -> dict[str, Any]:
    """The reset frame with the episode's own ids and the seed it echoes taken out (the same
    reset twice compares equal; what the seed changes stays in the observation)."""
    meta = {
        k: v
        for k, v in (data.get("metadata") or {}).items()
        if "episode_id" not in k and k != "seed"
    }
    return {**data, "metadata": meta}
