"""Graders that pay too much and tasks that cannot be solved: one planted flaw per
environment."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar, Literal

from envlab.core import (
    Action,
    Component,
    EnvSpec,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolCall,
    ToolCallError,
    ToolEnv,
    tool,
)
from tests.vet.python_gallery.leaks import N, _exact, _number_right, _product_tasks


# --- reward for calling tools at all ----------------------------------------------------------
class ToolUseEpisode(ToolEnv):
    """The flaw: half the reward is for having called any tool."""

    rubric: ClassVar[Rubric] = Rubric(
        [
            Component("correct", _number_right, weight=0.5),
            Component("used_tools", lambda c: float(len(c.tool_log) > 0), weight=0.5),
        ]
    )

    def oracle_actions(self, task: Task) -> list[Action]:
        a, b = task.metadata["factors"]
        return [
            Action(tool_calls=[ToolCall("multiply", {"a": a, "b": b}, id="o1")]),
            Action(text=str(task.answer)),
        ]

    @tool
    def multiply(self, a: int, b: int) -> str:
        """Multiply two whole numbers.

        Args:
            a: The first factor.
            b: The second factor.
        """
        return str(a * b)


class ToolUseEnv(EnvSpec):
    id = "gallery-tool-use"
    environment = ToolUseEpisode
    default_limits = Limits(max_steps=4)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [
                t.model_copy(update={"metadata": {"factors": [13 + i, 27 + 2 * i]}})
                for i, t in enumerate(_product_tasks("tooluse", n))
            ]
        )


# --- a grader that trusts a status field a write tool sets -----------------------------------
class RefundEpisode(ToolEnv):
    """Refund a claim the amount its record states, then close it. The flaw: the grader reads
    the status the agent sets, not the refund."""

    rubric: ClassVar[Rubric] = Rubric(
        [Component("closed", lambda c: float(c.state["status"] == "closed"))]
    )

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.status, self.refunded = "open", 0.0

    def state(self) -> dict[str, Any]:
        return {**super().state(), "status": self.status, "refunded": self.refunded}

    def oracle_actions(self, task: Task) -> list[Action]:
        claim = task.metadata["claim"]
        return [
            Action(
                tool_calls=[ToolCall("refund", {"claim_id": claim, "amount": task.answer}, id="o1")]
            ),
            Action(
                tool_calls=[
                    ToolCall("set_status", {"claim_id": claim, "status": "closed"}, id="o2")
                ]
            ),
            Action(text="Refunded and closed."),
        ]

    @tool
    def get_claim(self, claim_id: str) -> str:
        """A claim's record.

        Args:
            claim_id: The claim's id.
        """
        assert self.task is not None
        if claim_id != self.task.metadata["claim"]:
            raise ToolCallError(f"no claim {claim_id}")
        return json.dumps({"claim_id": claim_id, "amount_due": self.task.answer + 0.25})

    @tool(writes=True)
    def refund(self, claim_id: str, amount: float) -> str:
        """Refund an amount on a claim.

        Args:
            claim_id: The claim's id.
            amount: The amount to refund.
        """
        self.refunded += amount
        return "refunded"

    @tool(writes=True)
    def set_status(self, claim_id: str, status: Literal["open", "pending", "closed"]) -> str:
        """Set a claim's status.

        Args:
            claim_id: The claim's id.
            status: The new status.
        """
        self.status = status
        return f"status: {status}"


class StatusFieldEnv(EnvSpec):
    id = "gallery-status-field"
    environment = RefundEpisode
    default_limits = Limits(max_steps=8)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [
                Task(
                    id=f"claim-{i}",
                    answer=40.5 + 7 * i,
                    prompt=f"Claim CL-{700 + i} is due a refund of its amount due less "
                    "the 0.25 fee. Refund it, then close the claim.",
                    metadata={"claim": f"CL-{700 + i}"},
                )
                for i in range(n or N)
            ]
        )


# --- a grader that accepts any reply with a number in its format -----------------------------
class AnyNumberEpisode(ToolEnv):
    """The flaw: the grader checks the answer's format, never its value."""

    rubric: ClassVar[Rubric] = Rubric(
        [
            Component(
                "correct",
                lambda c: float(re.search(r"Answer:\s*-?\d+", c.final_answer or "") is not None),
            )
        ]
    )

    def system_prompt(self) -> str:
        return "Work it out, then end with 'Answer: <number>'."

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=f"Answer: {task.answer}")]


class AnyNumberEnv(EnvSpec):
    id = "gallery-any-number"
    environment = AnyNumberEpisode
    default_limits = Limits(max_steps=1)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return _product_tasks("anynum", n)


# --- a grader that accepts a list of every candidate ------------------------------------------
ZOOS = [
    [("kudu", 250), ("tapir", 300), ("okapi", 230)],
    [("eland", 900), ("bongo", 400)],
    [("gaur", 1200), ("yak", 800), ("bison", 1000)],
    [("moose", 600), ("elk", 330)],
    [("zebu", 500), ("nilgai", 280)],
    [("camel", 650), ("llama", 180), ("alpaca", 70)],
    [("walrus", 1500), ("seal", 150)],
    [("rhino", 2300), ("hippo", 1800)],
    [("ostrich", 120), ("emu", 45)],
    [("giraffe", 1200), ("okapi", 230), ("gazelle", 30)],
]


class ZooEpisode(ToolEnv):
    """The flaw: the grader checks that the answer is named somewhere in the reply."""

    rubric: ClassVar[Rubric] = Rubric(
        [
            Component(
                "correct", lambda c: float(str(c.task.answer) in (c.final_answer or "").lower())
            )
        ]
    )

    def oracle_actions(self, task: Task) -> list[Action]:
        return [
            Action(tool_calls=[ToolCall("list_animals", {}, id="o1")]),
            Action(text=str(task.answer)),
        ]

    @tool
    def list_animals(self) -> str:
        """The animals of this zoo with their weight in kg."""
        assert self.task is not None
        return json.dumps([{"name": a, "kg": w} for a, w in self.task.metadata["zoo"]])


class CandidateListEnv(EnvSpec):
    id = "gallery-candidate-list"
    environment = ZooEpisode
    default_limits = Limits(max_steps=4)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [
                Task(
                    id=f"zoo-{i}",
                    answer=max(z, key=lambda a: a[1])[0],
                    prompt="Which animal of this zoo is the heaviest? Reply with its name.",
                    metadata={"zoo": z},
                )
                for i, z in enumerate(ZOOS[: n or N])
            ]
        )


# --- identical tasks with different answers ---------------------------------------------------
CAPITALS = [
    ("Australia", "Canberra"),
    ("Canada", "Ottawa"),
    ("Turkey", "Ankara"),
    ("Nigeria", "Abuja"),
    ("Morocco", "Rabat"),
    ("Vietnam", "Hanoi"),
    ("Australia", "Sydney"),
    ("Canada", "Toronto"),
    ("Peru", "Lima"),
    ("Chile", "Santiago"),
]


class QuizEpisode(ToolEnv):
    rubric: ClassVar[Rubric] = Rubric([Component("correct", _exact)])

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=str(task.answer))]


class DuplicateTasksEnv(EnvSpec):
    """The flaw: a data set with two rows of the same question and different answers."""

    id = "gallery-duplicates"
    environment = QuizEpisode
    default_limits = Limits(max_steps=1)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [
                Task(
                    id=f"quiz-{i}",
                    answer=cap,
                    prompt=f"What is the capital of {c}? Reply with the city only.",
                )
                for i, (c, cap) in enumerate(CAPITALS[: n or N])
            ]
        )


def gate_that_never_fires() -> Rubric:
    """The flaw: a format gate with threshold 0 (a score is never below it)."""
    return Rubric(
        [
            Component(
                "one_line",
                lambda c: float("\n" not in (c.final_answer or "")),
                gate=True,
                threshold=0.0,
            ),
            Component("correct", _exact),
        ]
    )
