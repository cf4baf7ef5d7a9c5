"""Agents without a model: self-checks and baselines (``noop``, ``oracle``, ``random``)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from typing import Any

from envlab.core import Action, Agent, AgentSpec, ConfigError, EpisodeContext, Observation, ToolCall
from envlab.core.toolenv import RETRYABLE_MARK, TRUNCATED_MARK
from envlab.core.tools import ToolSpec


class NoopAgent(Agent):
    """Stops at once with an empty answer. Any environment where it scores is suspect."""

    name = "noop"

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:noop")

    async def act(self, observation: Observation) -> Action:
        return Action(text="")


DEFAULT_RETRIES = 5
"""How many times in a row the oracle sends a call again after a retryable error."""
DEFAULT_REPEATS = 2
"""How many times the verifying oracle repeats a write its read-back did not show."""


class OracleAgent(Agent):
    """A privileged agent that replays the environment's reference solution.

    It reads hidden task data, so its score checks the environment (a solvable task, a grader
    that accepts the right answer), never an agent's skill. A call answered with a retryable
    error (``RETRYABLE_MARK``: a transient failure, a rate limit; the tool was not run) is sent
    again, unchanged, up to ``max_retries`` times in a row, before the next action.

    **Verifying writes** (``verify_writes=True``; ``--agent oracle --agent-arg
    verify_writes=true``): the oracle acts on what it reads, as careful production agents do.
    After a write succeeds it reads the record back and, when the read does not show the
    write's effect, takes the write as not applied and sends it again, unchanged and without
    asking the user again, at most ``max_repeats`` times; each repeat is read back in turn.
    What a repeat costs is graded as what it is: the tool's refusal (a pending order cancelled
    twice), a write the user did not confirm (``reward=strict``'s ``confirmed_writes``), or a
    changed state. In a clean environment a read-back always agrees, so it scores what the
    plain oracle scores; under ``stale`` reads it repeats writes (``envlab robustness``).

    - *Which read.* The read-back of a write is the one read tool (``writes=False``, with
      required parameters) whose required parameters the write's own arguments all give
      (``cancel_pending_order(order_id, reason)`` -> ``get_order_details(order_id)``;
      ``modify_user_address(user_id, ...)`` -> ``get_user_details(user_id)``); none, or more
      than one, and the write is not verified. The rule reads only the tools' declarations
      (``EpisodeContext.tools``), what any agent is shown. So the environment needs no hook
      (a ``read_back`` method on ``TauEpisode`` would need the engine to pass it in a new
      ``EpisodeContext`` field and every wrapper to forward it) and no entry point is added;
      and the oracle meets the state only through its tools, as perturbed as any agent's (a
      stale read-back included), never by a side door into the environment.
    - *"Shows the effect".* The write's result, when it is a JSON record (τ's writes return
      the record they changed), is compared with the record read back, on the fields the two
      share: all equal is applied; one different is not applied. A read-back that shares no
      field (``book_reservation``'s reservation vs the user), that is not a JSON record (cut,
      broken, with an injected notice appended), or that is an error proves nothing either
      way: no repeat. A repeat the tool refuses ends the verification (the refusal is the
      tool's answer; sending it again would be refused again).
    """

    name = "oracle"
    privileged = True

    def __init__(
        self,
        max_retries: int = DEFAULT_RETRIES,
        verify_writes: bool = False,
        max_repeats: int = DEFAULT_REPEATS,
    ) -> None:
        if max_retries < 0:
            raise ConfigError(f"the oracle's max_retries must be >= 0, got {max_retries}")
        if type(verify_writes) is not bool:
            raise ConfigError(
                f"the oracle's verify_writes must be true or false, got {verify_writes!r}"
            )
        if max_repeats < 0:
            raise ConfigError(f"the oracle's max_repeats must be >= 0, got {max_repeats}")
        self.max_retries = max_retries
        self.verify_writes = verify_writes
        self.max_repeats = max_repeats
        self._queue: list[Action] = []
        self._last: Action | None = None
        self._retries = 0
        self._tools: dict[str, ToolSpec] = {}
        self._check: _WriteCheck | None = None
        self.repeated: list[str] = []
        """The writes sent again because a read-back did not show them (their tool names)."""

    @property
    def spec(self) -> AgentSpec:
        limits: dict[str, Any] = {}
        if self.max_retries != DEFAULT_RETRIES:
            limits["max_retries"] = self.max_retries
        harness = "scripted:oracle"
        if self.verify_writes:
            harness = "scripted:oracle+verify_writes"
            limits["max_repeats"] = self.max_repeats
        return AgentSpec(name=self.name, harness=harness, privileged=True, limits=limits)

    async def start(self, ctx: EpisodeContext) -> None:
        if ctx.oracle_actions is None:
            raise ConfigError("the oracle agent needs privileged access; the engine gave none")
        self._queue = list(ctx.oracle_actions)
        self._tools = {t.name: t for t in ctx.tools}

    async def act(self, observation: Observation) -> Action:
        again = self._to_retry(observation)
        if again and self._retries < self.max_retries:
            self._retries += 1
            calls = [replace(c, id=f"{c.id}_retry{self._retries}" if c.id else "") for c in again]
            self._last = Action(tool_calls=calls)
            return self._last
        self._retries = 0
        check = self._verify(observation) if self.verify_writes else None
        if check is not None:
            self._last = check
            return check
        self._last = self._queue.pop(0) if self._queue else Action(text="")
        return self._last

    def _to_retry(self, observation: Observation) -> list[ToolCall]:
        """The calls of the last action answered with a retryable error (results come in the
        order of the calls)."""
        if self._last is None or not self._last.tool_calls:
            return []
        return [
            call
            for call, r in zip(self._last.tool_calls, observation.tool_results, strict=False)
            if (r.is_error and r.content.startswith(f"Error: {RETRYABLE_MARK}"))
            or (self._cut_read(call, r.content))
        ]

    def _cut_read(self, call: ToolCall, content: str) -> bool:
        """A read whose answer was cut short: sent again for the whole answer (a write that
        answered is never sent again here: it was carried out)."""
        spec = self._tools.get(call.name)
        return TRUNCATED_MARK in content and spec is not None and not spec.writes

    def _verify(self, observation: Observation) -> Action | None:
        """The read-back or the repeat the answer to the last action calls for, else None."""
        last, check = self._last, self._check
        if last is None or len(last.tool_calls) != 1 or len(observation.tool_results) != 1:
            self._check = None
            return None
        call, result = last.tool_calls[0], observation.tool_results[0]
        spec = self._tools.get(call.name)
        if spec is not None and spec.writes:  # a write (gold, retried or repeated) answered
            self._check = None
            read = _read_back(call, self._tools)
            record = None if result.is_error else _record(result.content)
            if read is None or record is None:
                return None
            write, repeats = (check.write, check.repeats) if check is not None else (call, 0)
            self._check = _WriteCheck(write, record, read, repeats)
            return Action(
                tool_calls=[replace(read, id=f"verify_{write.id or write.name}_{repeats}")]
            )
        if check is None or call.name != check.read.name:
            self._check = None
            return None
        self._check = None
        seen = _record(result.content)
        if result.is_error or seen is None or _shows(check.record, seen) is not False:
            return None
        if check.repeats >= self.max_repeats:
            return None
        check.repeats += 1
        self._check = check
        self.repeated.append(check.write.name)
        base = check.write.id or check.write.name
        return Action(tool_calls=[replace(check.write, id=f"{base}_repeat{check.repeats}")])


@dataclass(slots=True)
class _WriteCheck:
    """A write being verified: the call, the record it returned, the read that shows it."""

    write: ToolCall
    record: dict[str, Any]
    read: ToolCall
    repeats: int = 0


def _read_back(write: ToolCall, tools: dict[str, ToolSpec]) -> ToolCall | None:
    """The read that shows ``write``'s record: the one read tool whose required parameters the
    write's arguments all give (their values taken from there); None if none or several."""
    args = write.arguments
    if not isinstance(args, dict):
        return None
    found = [
        spec
        for spec in tools.values()
        if not spec.writes
        and (need := spec.parameters.get("required", []))
        and all(k in args for k in need)
    ]
    if len(found) != 1:
        return None
    need = found[0].parameters["required"]
    return ToolCall(found[0].name, {k: args[k] for k in need})


def _record(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON record (an object), else None."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _shows(written: dict[str, Any], read: dict[str, Any]) -> bool | None:
    """Whether the record read back shows the written one: every shared field equal (True),
    one different (False); no field shared: None (nothing to tell)."""
    shared = written.keys() & read.keys()
    if not shared:
        return None
    return all(written[k] == read[k] for k in shared)


def _random_value(schema: dict[str, Any], r: random.Random) -> Any:
    t = schema.get("type")
    if "enum" in schema:
        return r.choice(schema["enum"])
    if t == "integer":
        return r.randint(-10, 100)
    if t == "number":
        return round(r.uniform(-10, 100), r.choice([0, 2]))
    if t == "boolean":
        return r.random() < 0.5
    if t == "array":
        return []
    if t == "object":
        return {}
    return r.choice(["", "a", "test", "42"])


class RandomAgent(Agent):
    """Calls random tools with random well-typed arguments, then answers a random number.

    A floor for learning signal: an environment where it scores often is too easy or leaky.
    """

    name = "random"

    def __init__(self, max_tool_steps: int = 3) -> None:
        self.max_tool_steps = max_tool_steps
        self._rng = random.Random(0)
        self._tools: list[ToolSpec] = []
        self._left = 0

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(
            name=self.name,
            harness="scripted:random",
            limits={"max_tool_steps": self.max_tool_steps},
        )

    async def start(self, ctx: EpisodeContext) -> None:
        self._rng = random.Random(ctx.seed)
        self._tools = ctx.tools
        self._left = self._rng.randint(0, self.max_tool_steps) if ctx.tools else 0

    async def act(self, observation: Observation) -> Action:
        r = self._rng
        if self._left > 0:
            self._left -= 1
            spec = r.choice(self._tools)
            props = spec.parameters.get("properties", {})
            args = {k: _random_value(v, r) for k, v in props.items()}
            return Action(tool_calls=[ToolCall(spec.name, args, id=f"rnd_{self._left}")])
        return Action(text=f"The answer is {r.randint(0, 100)}.")
