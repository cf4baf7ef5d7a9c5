"""One τ episode: the agent talks to a simulated user and calls the domain's tools on its own
copy of the database; graded on the final database and on what it told the user."""

from __future__ import annotations

from typing import Any, ClassVar

from envlab.core import (
    Action,
    EpisodeOrderError,
    Observation,
    Rubric,
    StepResult,
    Task,
    ToolCall,
    ToolCallError,
    ToolEnv,
    ToolResult,
)
from envlab.envs.tau.db import Database, Schema
from envlab.envs.tau.rewards import IDENTITY_TOOLS, TRANSFER
from envlab.envs.tau.tools import DomainTools, check_encodable
from envlab.envs.tau.users import STOP, Facts, UserSimulator


class TauEpisode(ToolEnv, DomainTools):
    """The conversation of one task. A step is one message of the agent: tool calls (answered
    by the tools) or text (answered by the user). The episode ends when the user says
    ``###STOP###``, when the agent transfers to a human, or at the step limit.

    Subclasses mix in a domain's tools and set ``domain`` and ``schema``; the spec sets
    ``make_user`` and the rubric (``reward=tau|strict``)."""

    domain: ClassVar[str]
    schema: ClassVar[Schema]

    def __init__(self, spec: Any = None) -> None:
        super().__init__(spec)
        self.user: UserSimulator | None = None
        self.events: list[dict[str, Any]] = []
        """The conversation in order: ``{"by": "user"|"agent", "text"}`` and ``{"by": "tool",
        "name", "arguments", "result", "writes", "error"}``; what the strict gates read."""
        self.opening = ""
        self._has_db = False

    @property
    def rubric(self) -> Rubric:  # type: ignore[override]
        return self.spec.rubric  # type: ignore[no-any-return,union-attr]

    def system_prompt(self) -> str:
        return self.spec.policy  # type: ignore[no-any-return,union-attr]

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.db = Database(self.domain, self.schema)
        self._has_db = True
        self.user = self.spec.make_user(task, seed)  # type: ignore[union-attr]
        self.opening = await self.user.start()
        self.events.append({"by": "user", "text": self.opening})

    def prompt(self, task: Task) -> str:
        return self.opening

    async def step(self, action: Action) -> StepResult:
        if self.task is None or self.user is None:
            raise EpisodeOrderError("step() called before reset(); call reset(task) first")
        if action.tool_calls:
            return await super().step(action)
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
        result = await super().call_tool(call, default_id)
        spec = self._tool_specs.get(call.name)
        logged = self.tool_log[-1]
        if not _encodable(logged.get("arguments")):  # a call answered without run_tool
            logged.pop("arguments")  # (a perturbation's refusal): no unencodable text kept
        self.events.append(
            {
                "by": "tool",
                "name": _readable(call.name),
                "arguments": logged.get("arguments"),
                "result": result.content,
                "writes": bool(spec and spec.writes),
                "error": result.is_error,
            }
        )
        return result

    async def run_tool(self, call: ToolCall, default_id: str = "") -> ToolResult:
        """Run a call as τ-bench's ``Env.step`` does, after refusing text that cannot be
        encoded (``check_encodable``). A call of ``transfer_to_human_agents`` ends the
        conversation whatever it answers, as τ-bench's terminate tools do: no later call of
        the action runs."""
        try:
            problem = self._unencodable(call)
            if problem is None:
                return await super().run_tool(call, default_id)
            name = _readable(call.name)
            self.tool_log.append({"name": name, "error": problem})
            return ToolResult(call.id or default_id, name, f"Error: {problem}", is_error=True)
        finally:
            if call.name == TRANSFER:
                self.done = True

    def _unencodable(self, call: ToolCall) -> str | None:
        """Why the call's name or arguments cannot be encoded as UTF-8; None if they can (or
        if they do not decode, which ``run_tool`` answers)."""
        spec = self._tool_specs.get(call.name)
        try:
            check_encodable(call.name, call.arguments)
            if spec is not None:
                try:
                    decoded = spec.decode_arguments(call.arguments)
                except ToolCallError:
                    return None
                check_encodable(call.name, decoded)
        except ToolCallError as e:
            return str(e)
        return None

    def snapshot(self) -> tuple[int, bytes]:
        """The database as it is now (what the tools read), for ``restore``: stale reads
        (``envlab.envs.perturb``) answer from an earlier one. A memory copy of the SQLite
        image, about 2 ms for retail's 1.7 MB."""
        self.db.conn.commit()  # serialize() sees committed pages only
        return self.db.writes, self.db.conn.serialize()

    def restore(self, snap: tuple[int, bytes]) -> None:
        """Put the database back as it was at ``snapshot()`` (byte for byte)."""
        self.db.writes, image = snap
        self.db.conn.deserialize(image)

    def state(self) -> dict[str, Any]:
        return {
            **super().state(),
            "changes": self.db.changes() if self._has_db else {},
            "events": list(self.events),
        }

    def oracle_actions(self, task: Task) -> list[Action]:
        """The gold actions, each write after the user said yes, then the required outputs; the
        user looked up first (reads, which change nothing)."""
        ask = "Before we start, may I have your user id, or your email, or your name and zip code?"
        actions = [Action(text=ask), *self._identity_lookup(task)]
        for i, gold in enumerate(task.answer["actions"]):
            spec = self._tool_specs.get(gold["name"])
            if spec is not None and spec.writes and not gold["refused"]:
                what = gold["name"].replace("_", " ")
                actions.append(Action(text=f"I am about to {what}. Shall I proceed (yes/no)?"))
            call = ToolCall(gold["name"], gold["kwargs"], id=f"gold_{i}")
            actions.append(Action(tool_calls=[call]))
        outputs = "; ".join(task.answer["outputs"])
        done = "Your request has been processed successfully."
        actions.append(Action(text=f"{done} {outputs}".strip()))
        return actions

    def _identity_lookup(self, task: Task) -> list[Action]:
        """Where the gold solution never looks the user up: the lookup the user's facts allow
        (or, with a user id the user states, nothing); then the user's own record."""
        own = ToolCall("get_user_details", {"user_id": task.metadata["user_id"]}, id="user")
        lookups: list[ToolCall] = []
        facts = Facts.of(task.metadata["instruction"])
        if {a["name"] for a in task.answer["actions"]} & set(IDENTITY_TOOLS) or facts.user_id:
            pass
        elif facts.email and "find_user_id_by_email" in self._tool_specs:
            lookups = [
                ToolCall("find_user_id_by_email", {"email": e}, id=f"id_{i}")
                for i, e in enumerate(facts.email.split(" or "))
            ]
        elif facts.zip and "find_user_id_by_name_zip" in self._tool_specs:
            args = {"first_name": facts.first_name, "last_name": facts.last_name, "zip": facts.zip}
            lookups = [ToolCall("find_user_id_by_name_zip", args, id="id_0")]
        return [Action(tool_calls=[c]) for c in (*lookups, own)]

    async def close(self) -> None:
        if self.user is not None:
            await self.user.close()
        if self._has_db:
            self.db.close()


def _encodable(value: Any) -> bool:
    try:
        check_encodable("", value)
    except ToolCallError:
        return False
    return True


def _readable(text: str) -> str:
    """``text`` with any character UTF-8 cannot encode written as an escape (``\\ud800``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
