"""The wire: envlab's episode inside OpenEnv's WebSocket frames (one definition, both sides).

Pure pydantic, no FastAPI: ``envlab serve`` (the server) and ``RemoteEnv`` (the client) both
build and read frames here.

Frames, as OpenEnv 0.10 sends them over ``/ws`` (``openenv.core.env_server.types``):

- client -> server: ``{"type": "reset", "data": ResetData}``, ``{"type": "step", "data":
  ActionData}``, ``{"type": "state"}``, ``{"type": "close"}``;
- server -> client: ``{"type": "observation", "data": StepData}`` (OpenEnv's
  ``serialize_observation`` shape: ``observation``, ``reward``, ``done``, ``metadata``),
  ``{"type": "state", "data": StateData}``, ``{"type": "error", "data": ErrorData}``.

The episode ends on the frame with ``done`` true (also when the limits truncated it:
``observation.truncated``). That frame is graded on the server, after the agent's last action:
its ``reward`` is the graded total and ``metadata["reward"]`` the ``RewardData`` (total and
components); a grader that failed twice is ``metadata["grader_failed"]`` with the reason and a
reward of 0.0 (the agent's score, never "not counted"). Before the end, ``reward`` is the step's
own reward. Nothing in a client frame can set a reward: step data has no reward field and
extra fields are refused (``bad_request``).
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envlab.core.rubric import Reward
from envlab.core.text import check_text, valid_text
from envlab.core.types import Action, Observation, ToolCall, ToolResult

try:  # a faster codec when installed; the frames are the same
    import orjson

    def dumps(frame: Any) -> str:
        """A frame as compact JSON text (an environment's invalid text as U+FFFD)."""
        try:
            return orjson.dumps(frame).decode()
        except orjson.JSONEncodeError:
            return orjson.dumps(valid_text(frame)).decode()

    _loads: Any = orjson.loads
except ImportError:  # pragma: no cover - orjson is optional

    def dumps(frame: Any) -> str:
        """A frame as compact JSON text (an environment's invalid text as U+FFFD)."""
        return json.dumps(valid_text(frame), separators=(",", ":"))

    _loads = json.loads

# --- error codes (``data.code`` of an error frame) ----------------------------------------------
CAPACITY = "capacity"
"""The session was refused: the server holds ``--max-sessions`` sessions already (then closed)."""
BAD_REQUEST = "bad_request"
"""A malformed frame: not JSON, an unknown type, data that does not fit (the client's fault)."""
EPISODE_ORDER = "episode_order"
"""Out of order: a step before reset or after the episode ended, a second reset."""
ENV_ERROR = "env_error"
"""The environment raised while resetting or stepping."""
INFRA_ERROR = "infra_error"
"""The server's machinery failed (a sandbox that did not start, a reset past its limit):
never the agent's failure; a client retries the episode."""
IDLE_TIMEOUT = "idle_timeout"
"""The session was silent longer than the server's ``--idle-timeout`` and is closed (its episode
is gone, ungraded); the client took too long between frames."""
ERROR_CODES = (CAPACITY, BAD_REQUEST, EPISODE_ORDER, ENV_ERROR, INFRA_ERROR, IDLE_TIMEOUT)

WS_PATH = "/ws"
SESSION_HEADER = "X-Envlab-Session"
"""The HTTP routes' session: ``POST /reset`` answers it (header and ``session_id`` field);
``/step``, ``/state`` and ``/close`` need it back (header or ``session_id`` field)."""


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- client -> server --------------------------------------------------------------------------
class ResetData(BaseModel):
    """Reset parameters. ``task_id`` names a task of ``spec.tasks(seed=task_seed, split=split)``;
    without it the server picks one by ``seed`` (``tasks[seed % len(tasks)]``, seed 0 if none).
    ``seed`` is the episode's seed; ``episode_id`` a label echoed in the state. Other keys are
    ignored (OpenEnv passes reset kwargs through) and listed in the reset frame's
    ``metadata["ignored_reset_keys"]``."""

    model_config = ConfigDict(extra="allow")

    task_id: str | None = None
    seed: int | None = None
    episode_id: str | None = Field(None, max_length=255)
    split: str = "test"
    task_seed: int = 0

    def ignored_keys(self) -> list[str]:
        return sorted(self.model_extra or {})


class ToolCallData(_Wire):
    id: str = ""
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class ActionData(_Wire):
    """An envlab ``Action``. ``metadata`` (what OpenEnv's typed actions carry) is accepted and
    ignored; any other key (a forged ``reward``, ``done``, ``episode_id``) is ``bad_request``."""

    text: str = ""
    tool_calls: list[ToolCallData] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)


# --- server -> client --------------------------------------------------------------------------
class ToolResultData(_Wire):
    tool_call_id: str
    name: str
    content: str
    is_error: bool = False


class ObservationData(_Wire):
    text: str = ""
    tool_results: list[ToolResultData] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The tools' JSON schemas (OpenAI function format), on the reset frame."""
    system_prompt: str | None = None
    """The environment's system prompt, on the reset frame."""
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)


class RewardData(_Wire):
    total: float
    components: dict[str, float] = Field(default_factory=dict)
    gated_by: str | None = None
    details: dict[str, Any] | None = None


class StepData(BaseModel):
    """The data of an observation frame (OpenEnv's ``serialize_observation`` shape)."""

    model_config = ConfigDict(extra="ignore")

    observation: ObservationData
    reward: float | None = None
    done: bool = False
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def graded(self) -> RewardData | None:
        raw = self.metadata.get("reward")
        return RewardData.model_validate(raw) if isinstance(raw, dict) else None

    @property
    def grader_failed(self) -> str | None:
        reason = self.metadata.get("grader_failed")
        return None if reason is None else str(reason)


class StateData(BaseModel):
    """The data of a state frame: OpenEnv's ``State`` fields, then envlab's."""

    model_config = ConfigDict(extra="ignore")

    episode_id: str | None = None
    step_count: int = 0
    task_id: str | None = None
    done: bool = False
    env: dict[str, Any] = Field(default_factory=dict)


class ErrorData(BaseModel):
    model_config = ConfigDict(extra="allow")

    message: str
    code: str


class TaskInfo(_Wire):
    """A task as the Task API shows it: what a non-privileged agent may know, never the answer."""

    id: str
    prompt: str
    split: str = "test"


class ListTasksRequest(BaseModel):
    """Body of ``POST /{env}/tasks`` (OpenEnv's, plus envlab's ``seed`` and ``n``); the answer is
    ``{"tasks": [TaskInfo...], "env_name": name}``."""

    model_config = ConfigDict(extra="ignore")

    split: str = "test"
    seed: int = 0
    n: int | None = Field(None, ge=0)


class GetTaskRequest(BaseModel):
    """Body of ``POST /{env}/task``; the answer is ``{"task": TaskInfo}``."""

    model_config = ConfigDict(extra="ignore")

    split: str = "test"
    index: int
    seed: int = 0


# --- frames ------------------------------------------------------------------------------------
class WireError(Exception):
    """A frame that does not fit the wire; ``code`` is the error code to answer with."""

    def __init__(self, message: str, code: str = BAD_REQUEST) -> None:
        super().__init__(message)
        self.code = code


def reset_frame(
    task_id: str | None = None,
    seed: int | None = None,
    episode_id: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    data = {"task_id": task_id, "seed": seed, "episode_id": episode_id, **extra}
    return {"type": "reset", "data": {k: v for k, v in data.items() if v is not None}}


def step_frame(action: Action) -> dict[str, Any]:
    return {"type": "step", "data": action_to_wire(action)}


def state_frame() -> dict[str, Any]:
    return {"type": "state"}


def close_frame() -> dict[str, Any]:
    return {"type": "close"}


def error_frame(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "data": {"message": message, "code": code, **extra}}


def observation_frame(data: dict[str, Any]) -> dict[str, Any]:
    return {"type": "observation", "data": data}


def state_response(data: StateData) -> dict[str, Any]:
    return {"type": "state", "data": data.model_dump()}


def parse_client_frame(raw: str | bytes) -> tuple[str, dict[str, Any]]:
    """``(type, data)`` of a client frame; ``WireError`` (``bad_request``) if malformed."""
    try:
        frame = _loads(raw)
    except (ValueError, RecursionError) as e:
        raise WireError(f"the frame is not JSON: {e}") from None
    if not isinstance(frame, dict):
        raise WireError("a frame is a JSON object with a 'type' (reset, step, state, close)")
    kind = frame.get("type")
    if kind not in ("reset", "step", "state", "close"):
        raise WireError(
            f"unknown frame type {kind!r}: send one of reset, step, state, close "
            '(e.g. {"type": "reset", "data": {"seed": 0}})'
        )
    data = frame.get("data", {})
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise WireError(
            f"the data of a {kind} frame must be a JSON object, not {type(data).__name__}"
        )
    return kind, data


def parse_reset(data: dict[str, Any]) -> ResetData:
    try:
        return ResetData.model_validate(data)
    except ValidationError as e:
        raise WireError(
            f"bad reset data: {_problems(e)}; fields: {', '.join(ResetData.model_fields)}"
        ) from None


# --- actions -----------------------------------------------------------------------------------
def action_to_wire(action: Action) -> dict[str, Any]:
    return {
        "text": action.text,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in action.tool_calls
        ],
    }


def action_from_wire(data: dict[str, Any]) -> Action:
    """The ``Action`` in step data; ``WireError`` (``bad_request``) if it does not fit."""
    try:
        check_text(data, "the action")  # the agent's text must be writable, everywhere
    except ValueError as e:
        raise WireError(f"bad step data: {e}") from None
    if len(data) == 1 and type(data.get("text")) is str:  # the plain answer: no model needed
        return Action(text=data["text"])
    try:
        a = ActionData.model_validate(data)
    except ValidationError as e:
        raise WireError(
            f"bad step data: {_problems(e)}; an action is "
            '{"text": str, "tool_calls": [{"id": str, "name": str, "arguments": object|str}]}'
        ) from None
    calls = [ToolCall(name=c.name, arguments=c.arguments, id=c.id) for c in a.tool_calls]
    return Action(text=a.text, tool_calls=calls)


# --- observations ------------------------------------------------------------------------------
def observation_to_wire(
    obs: Observation,
    *,
    reward: float | None,
    done: bool,
    truncated: bool = False,
    tools: list[dict[str, Any]] | None = None,
    system_prompt: str | None = None,
    info: dict[str, Any] | None = None,
    graded: Reward | None = None,
    grader_failed: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The data of an observation frame. ``graded`` (the end of the episode) sets ``reward``
    to its total and ``metadata["reward"]``."""
    meta = dict(metadata or {})
    if graded is not None:
        reward = graded.total
        meta["reward"] = reward_to_wire(graded)
    if grader_failed is not None:
        meta["grader_failed"] = grader_failed
    return {
        "observation": {
            "text": obs.text,
            "tool_results": [
                {
                    "tool_call_id": r.tool_call_id,
                    "name": r.name,
                    "content": r.content,
                    "is_error": r.is_error,
                }
                for r in obs.tool_results
            ],
            "tools": tools or [],
            "system_prompt": system_prompt,
            "truncated": truncated,
            "info": _jsonable(info) if info else {},
        },
        "reward": _finite_or_none(reward),
        "done": done,
        "metadata": meta,
    }


def reward_to_wire(reward: Reward) -> dict[str, Any]:
    out: dict[str, Any] = {
        "total": reward.total,
        "components": dict(reward.components),
        "gated_by": reward.gated_by,
    }
    if reward.details:
        out["details"] = _jsonable(reward.details)
    return out


def step_from_wire(data: dict[str, Any]) -> StepData:
    """Read an observation frame's data (envlab's server); ``WireError`` if it does not fit."""
    try:
        return StepData.model_validate(data)
    except ValidationError as e:
        raise WireError(
            f"bad observation frame from the server: {_problems(e)}", INFRA_ERROR
        ) from None


def observation_from_wire(obs: ObservationData) -> Observation:
    results = [ToolResult(r.tool_call_id, r.name, r.content, r.is_error) for r in obs.tool_results]
    return Observation(text=obs.text, tool_results=results)


def _finite_or_none(x: float | None) -> float | None:
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _plain(value: Any, depth: int = 0) -> bool:
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return True
    if t is float:
        return math.isfinite(value)
    if depth > 32:
        return False
    if t is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if t is list:
        return all(_plain(v, depth + 1) for v in value)
    return False


def _jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (anything else as its string)."""
    if _plain(value):
        return value
    try:
        return json.loads(json.dumps(value, default=str, allow_nan=False))
    except (TypeError, ValueError, RecursionError):
        return {"unserialisable": repr(value)[:200]}


def _problems(e: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or '(data)'}: {err['msg']}" for err in e.errors()
    )
