"""One replayed session: the agent talks to the logged user and its tools answer from the logs.

A step is one message of the agent, as in a τ episode: tool calls (answered from the logs) or
text (answered by the user: the logged user's next reply, or the model-backed user). The episode
ends when the user says ``###STOP###``: the logged user says it after the last logged text.

The episode grades in private. What the agent (and any client of ``envlab serve``) sees, the
observations, a step's ``info`` and ``state()``, holds only what the agent itself sent and was
answered: never the reference session's id, nor which session's log answered a call, nor the
logged arguments a fuzzy match stood for, nor whether a call was the reference's (the counted
``writes`` and exactly matched ``reads`` would tell that). Those are in ``grading_state()``,
which only the rubric reads (``grading_context()``).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from envlab.core import (
    Action,
    EpisodeOrderError,
    GradingContext,
    Observation,
    Reward,
    Rubric,
    StepResult,
    Task,
    ToolCall,
    ToolCallError,
    ToolEnv,
    ToolResult,
)
from envlab.envs.replay.index import Key, canonical
from envlab.envs.tau.users import STOP, UserSimulator

if TYPE_CHECKING:
    from envlab.envs.replay.format import LogMessage, LogSession
    from envlab.envs.replay.spec import ReplaySpec

ANSWER_ATTR = "_replay_answer"


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, RecursionError):  # too deep to decode: compared as text
        return arguments


def after_opening(session: LogSession) -> list[LogMessage]:
    """The session's messages from its first user turn on (the episode starts there)."""
    first = next(i for i, m in enumerate(session.messages) if m.role == "user")
    return session.messages[first:]


def user_script(session: LogSession) -> tuple[str, list[str | None]]:
    """The logged user: the opening (the user turns before the agent's first text), and the
    reply to each text the agent sent (the user turns after it, joined; ``None``: the user said
    nothing before the agent spoke again). A text is an assistant message without tool calls;
    what the agent said before the user's first turn (a greeting) is not replayed."""
    buckets: list[list[str]] = [[]]
    for m in after_opening(session):
        if m.role == "assistant" and not m.tool_calls:
            buckets.append([])
        elif m.role == "user":
            buckets[-1].append(m.text)
    replies = ["\n\n".join(b) if b else None for b in buckets[1:]]
    return "\n\n".join(buckets[0]), replies


class LoggedUser(UserSimulator):
    """The logged session's user, turn by turn whatever the agent says: the reply logged after
    the agent's k-th text answers its k-th text (silence where none was logged); ``STOP`` after
    the last logged text, or where a logged turn says it."""

    def __init__(self, opening: str, replies: list[str | None]) -> None:
        self.opening, self.replies = opening, list(replies)
        self.said = 0

    async def start(self) -> str:
        return self.opening

    async def reply(self, agent_message: str) -> str:
        self.said += 1
        if self.said > len(self.replies):
            return STOP
        reply = self.replies[self.said - 1]
        if reply is None:
            return STOP if self.said == len(self.replies) else ""
        return reply

    @property
    def info(self) -> dict[str, Any]:
        return {"user": "logged", "turn": self.said}


class ReplayEpisode(ToolEnv):
    """The episode of a replay task (``ReplaySpec``)."""

    spec: ReplaySpec

    def __init__(self, spec: ReplaySpec) -> None:
        super().__init__(spec)
        self._tool_specs = spec.tool_specs  # type: ignore[misc]
        self.user: UserSimulator | None = None
        self.events: list[dict[str, Any]] = []
        self.writes: list[tuple[str, str]] = []
        self.reads: list[tuple[str, str]] = []
        """The read calls the logs answered, by the logged call that answered (its arguments)."""
        self.opening = ""
        self.reference = ""
        self.n_calls = self.n_unanswerable = self.n_fuzzy = 0
        self._seen: Counter[Key] = Counter()
        self._calling = ""
        self._outcome: dict[str, Any] = {}
        self._refusal: str | None = None
        self._step_calls: list[dict[str, Any]] = []
        """This step's calls as the agent may see them: tool, call id, unanswerable."""
        self.matches: list[dict[str, Any]] = []
        """Every call's match (the grader's only): which logged call answered, from which
        session, how similar; the refusal it was logged with."""

    @property
    def rubric(self) -> Rubric:  # type: ignore[override]
        return self.spec.rubric

    def system_prompt(self) -> str | None:
        return self.spec.session(self.reference).system() if self.reference else None

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.reference = task.answer["session_id"]
        self.user = self.spec.make_user(task, seed)
        self.opening = await self.user.start()
        self.events.append({"by": "user", "text": self.opening})

    def prompt(self, task: Task) -> str:
        return self.opening

    async def step(self, action: Action) -> StepResult:
        if self.task is None or self.user is None:
            raise EpisodeOrderError("step() called before reset(); call reset(task) first")
        if action.tool_calls:
            self._step_calls = []
            result = await super().step(action)
            missing = sum(1 for c in self._step_calls if c.get("unanswerable"))
            result.info.update(replay=self._step_calls, unanswerable=missing)
            return result
        if self.done:
            raise EpisodeOrderError("step() called after the conversation ended")
        self.n_steps += 1
        self.events.append({"by": "agent", "text": action.text})
        answer = await self.user.reply(action.text)
        self.events.append({"by": "user", "text": answer})
        self.done = STOP in answer
        if self.done:
            self.final_answer = action.text
        obs = Observation(text=answer, metadata={"from": "user", **self.user.info})
        return StepResult(obs, 0.0, done=self.done, info={"user": self.user.info})

    async def call_tool(self, call: ToolCall, default_id: str = "") -> ToolResult:
        self._calling, self._outcome, self._refusal = call.name, {}, None
        before = len(self.tool_log)
        result = await super().call_tool(call, default_id)
        spec = self._tool_specs.get(call.name)
        writes = bool(spec and spec.writes)
        entry = self.tool_log[-1] if len(self.tool_log) > before else {}
        entry.update(self._outcome, writes=writes)
        if self._refusal is not None:  # the logged refusal, word for word
            result = ToolResult(result.tool_call_id, call.name, self._refusal, is_error=True)
        self.events.append(
            {
                "by": "tool",
                "name": call.name,
                "arguments": entry.get("arguments"),
                "result": result.content,
                "writes": writes,
                # an unanswerable write counts as carried out: confirmed_writes checks it too
                "error": result.is_error and not (writes and self._outcome.get("unanswerable")),
            }
        )
        seen = {"tool": call.name, "call_id": result.tool_call_id}
        self._step_calls.append({**seen, "unanswerable": bool(self._outcome.get("unanswerable"))})
        self.matches.append({**seen, **self._outcome})
        return result

    async def run_tool(self, call: ToolCall, default_id: str = "") -> ToolResult:
        self._calling = call.name  # also when an interceptor (a perturbation) runs the call
        return await super().run_tool(call, default_id)

    def _replay_answer(self, /, **arguments: Any) -> str:
        """Every tool: the logged answer to this call (``LoggedToolSpec.attr``)."""
        name, cfg = self._calling, self.spec.config
        key = (name, canonical(arguments))
        writes = self._tool_specs[name].writes
        self.n_calls += 1
        fuzzy = cfg.fuzzy_threshold if cfg.match == "fuzzy" else None
        ans = self.spec.answers.lookup(key, self.reference, self._seen, fuzzy=fuzzy)
        if ans is None:
            self.n_unanswerable += 1
            self._outcome = {"match": None, "unanswerable": True}
            if writes:  # nothing says it would have failed: a write the agent made
                self.writes.append(key)
            raise ToolCallError(self._unanswerable_message(key))
        self._outcome = {"match": ans.match, "source": ans.source}
        if ans.match == "fuzzy":
            self.n_fuzzy += 1
            self._outcome.update(
                similarity=round(ans.similarity, 4), matched_arguments=_parsed(ans.arguments)
            )
        if not writes and ans.match == "exact":
            self.reads.append((name, ans.arguments))  # a lookup, also one the tool refused
        if ans.is_error:  # refused, as logged: only the reference's own exact refusal excuses
            self._outcome["logged_error"], self._refusal = True, ans.content
            if writes and (ans.source != self.reference or ans.match == "fuzzy"):
                self.writes.append(key)  # refused in another state: here it may have run
            raise ToolCallError(ans.content.removeprefix("Error: "))
        if writes:
            self.writes.append(key)  # the agent's own arguments, also when matched fuzzily
        return ans.content

    def _unanswerable_message(self, key: Key) -> str:
        fuzzy = self.spec.config.match == "fuzzy"
        hint = " (nor one close enough to match fuzzily)" if fuzzy else " (exact match)"
        args = key[1] if len(key[1]) <= 300 else f"{key[1][:300]}..."
        return (
            f"no logged answer for {key[0]}({args}): this environment replays logged sessions "
            f"and no session made this call with these arguments{hint}. The call did not run; "
            "call the tools as the logged sessions did."
        )

    def state(self) -> dict[str, Any]:
        """What the agent may see: the conversation as it went (its own calls and what they
        answered), how many calls reached the logs and how many the logs could not answer
        (each such answer says so)."""
        return {
            **super().state(),
            "events": list(self.events),
            "calls": self.n_calls,
            "unanswerable": self.n_unanswerable,
        }

    def grading_state(self) -> dict[str, Any]:
        """``state()`` and what only the grader reads: the writes that count, the reads the
        logs answered exactly, the fuzzy matches, the reference session and each call's match."""
        return {
            **self.state(),
            "writes": [list(w) for w in self.writes],
            "reads": [list(r) for r in self.reads],
            "fuzzy": self.n_fuzzy,
            "reference": self.reference,
            "matches": [dict(m) for m in self.matches],
        }

    def grading_context(self) -> GradingContext:
        if self.task is None:
            raise EpisodeOrderError("grade() called before reset(): there is no episode to grade")
        return GradingContext(
            self.task, self.final_answer, self.grading_state(), tuple(self.tool_log)
        )

    def _details(self, reward: Reward) -> Reward:
        """The grade's record: counts only. It travels to the client with the last frame, so no
        match (logged arguments, session ids, similarities: an oracle to climb) is in it."""
        counts = {"calls": self.n_calls, "unanswerable": self.n_unanswerable, "fuzzy": self.n_fuzzy}
        return reward.model_copy(update={"details": {**reward.details, "replay": counts}})

    async def score(self) -> Reward:
        return self._details(await super().score())

    def oracle_actions(self, task: Task) -> list[Action]:
        """The logged successful session's assistant messages, one action each, as logged (but
        a text before the user's first turn: the episode opens with that turn)."""
        session = self.spec.session(task.answer["session_id"])
        greeting = len(session.messages) - len(after_opening(session))
        actions = []
        for i, m in enumerate(session.messages):
            if m.role != "assistant" or (i < greeting and not m.tool_calls):
                continue
            calls = [
                ToolCall(c.function.name, c.function.arguments, id=c.id) for c in m.tool_calls or []
            ]
            actions.append(Action(text=m.text, tool_calls=calls))
        return actions

    async def close(self) -> None:
        if self.user is not None:
            await self.user.close()
