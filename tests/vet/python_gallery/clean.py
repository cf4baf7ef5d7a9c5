"""Clean environments: every task of each must be ``ok``."""

from __future__ import annotations

import json
import random
import re
from typing import Any, ClassVar, Literal

from envlab.core import (
    Action,
    Component,
    EnvSpec,
    GradingContext,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolCall,
    ToolCallError,
    ToolEnv,
    tool,
)

N = 10


def _bare_int(text: str | None) -> int | None:
    m = re.fullmatch(r"\s*(-?\d+)\s*\.?\s*", text or "")
    return int(m.group(1)) if m else None


# --- 1. a single answer, no tools -----------------------------------------------------------
def _legs_right(ctx: GradingContext) -> float:
    return float(_bare_int(ctx.final_answer) == ctx.task.answer)


class LegsEpisode(ToolEnv):
    rubric: ClassVar[Rubric] = Rubric([Component("correct", _legs_right)])

    def system_prompt(self) -> str:
        return "Answer with the number only."

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=str(task.answer))]


ANIMALS = [("spiders", 8), ("ants", 6), ("horses", 4), ("ducks", 2), ("crabs", 10)]


class LegsEnv(EnvSpec):
    """How many legs do K animals have? One reply, a number."""

    id = "gallery-legs"
    environment = LegsEpisode
    default_limits = Limits(max_steps=1)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        out = []
        for i in range(n or N):
            name, legs = ANIMALS[i % len(ANIMALS)]
            k = 11 + 3 * i
            out.append(
                Task(id=f"legs-{i}", prompt=f"How many legs do {k} {name} have?", answer=k * legs)
            )
        return TaskSet(out, seed=seed)


# --- 2. multi-step tools with a write tool --------------------------------------------------
TEAMS = ("payments", "search", "storage", "identity")
SERVICES = {
    "billing-api": "payments",
    "indexer": "search",
    "blobstore": "storage",
    "login": "identity",
    "ledger": "payments",
    "query-api": "search",
    "backup": "storage",
    "sso": "identity",
    "invoices": "payments",
    "crawler": "search",
}


def _right(ctx: GradingContext) -> float:
    want = {ctx.task.metadata["ticket"]: ctx.task.answer}
    return float(ctx.state["assigned"] == want)


class RoutingEpisode(ToolEnv):
    """Assign a ticket to the team that owns its service: read the ticket, read the owner."""

    rubric: ClassVar[Rubric] = Rubric([Component("assigned", _right)])

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.tickets = {task.metadata["ticket"]: task.metadata["service"], "TK-0000": "sso"}
        self.assigned: dict[str, str] = {}

    def state(self) -> dict[str, Any]:
        return {**super().state(), "assigned": dict(self.assigned)}

    def oracle_actions(self, task: Task) -> list[Action]:
        t = task.metadata["ticket"]
        return [
            Action(tool_calls=[ToolCall("get_ticket", {"ticket_id": t}, id="o1")]),
            Action(tool_calls=[ToolCall("assign", {"ticket_id": t, "team": task.answer}, id="o2")]),
            Action(text="Done."),
        ]

    @tool
    def get_ticket(self, ticket_id: str) -> str:
        """A ticket's service.

        Args:
            ticket_id: The ticket's id, e.g. TK-1234.
        """
        if ticket_id not in self.tickets:
            raise ToolCallError(f"no ticket {ticket_id}")
        return json.dumps({"ticket_id": ticket_id, "service": self.tickets[ticket_id]})

    @tool
    def get_owner(self, service: str) -> str:
        """The team that owns a service.

        Args:
            service: The service name.
        """
        if service not in SERVICES:
            raise ToolCallError(f"no service {service}")
        return f"owner of {service}: {SERVICES[service]}"

    @tool(writes=True)
    def assign(
        self, ticket_id: str, team: Literal["payments", "search", "storage", "identity"]
    ) -> str:
        """Assign a ticket to a team.

        Args:
            ticket_id: The ticket's id.
            team: The team.
        """
        if ticket_id not in self.tickets:
            raise ToolCallError(f"no ticket {ticket_id}")
        self.assigned[ticket_id] = team
        return "assigned"


class RoutingEnv(EnvSpec):
    id = "gallery-routing"
    environment = RoutingEpisode
    default_limits = Limits(max_steps=10)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        services = list(SERVICES)
        out = []
        for i in range(n or N):
            svc, ticket = services[i % len(services)], f"TK-{4100 + 37 * i}"
            out.append(
                Task(
                    id=f"route-{i}",
                    answer=SERVICES[svc],
                    prompt=f"Ticket {ticket} came in. Assign it to the team that owns "
                    "its service, then say Done.",
                    metadata={"ticket": ticket, "service": svc},
                )
            )
        return TaskSet(out, seed=seed)


# --- 3. one prompt, different tool state ----------------------------------------------------
def _count_right(ctx: GradingContext) -> float:
    return float(_bare_int(ctx.final_answer) == ctx.task.answer)


class StockEpisode(ToolEnv):
    rubric: ClassVar[Rubric] = Rubric([Component("correct", _count_right)])

    async def on_reset(self, task: Task, seed: int | None) -> None:
        self.stock: dict[str, int] = dict(task.metadata["stock"])

    def oracle_actions(self, task: Task) -> list[Action]:
        return [
            Action(tool_calls=[ToolCall("list_stock", {}, id="o1")]),
            Action(text=str(task.answer)),
        ]

    @tool
    def list_stock(self) -> str:
        """Every item in the warehouse with its units in stock."""
        return json.dumps(self.stock)


ITEMS = [
    "bolts",
    "nuts",
    "washers",
    "hinges",
    "screws",
    "rivets",
    "clamps",
    "springs",
    "brackets",
    "pins",
    "gears",
    "valves",
]


class StockEnv(EnvSpec):
    """The same question every time; the warehouse differs."""

    id = "gallery-stock"
    environment = StockEpisode
    default_limits = Limits(max_steps=4)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        out = []
        for i in range(n or N):
            r = random.Random(f"stock-{seed}-{i}")
            low = 2 + i  # distinct answers: 2..11
            stock = {
                it: (r.randint(0, 3) if k < low else r.randint(12, 60))
                for k, it in enumerate(ITEMS)
            }
            out.append(
                Task(
                    id=f"stock-{i}",
                    answer=low,
                    metadata={"stock": stock},
                    prompt="How many items in the warehouse have fewer than 4 units "
                    "in stock? Reply with the number only.",
                )
            )
        return TaskSet(out, seed=seed)


# --- 4. a partial-credit rubric -------------------------------------------------------------
COUNTRIES = [
    ("Japan", "Tokyo", "yen"),
    ("United Kingdom", "London", "pound"),
    ("India", "New Delhi", "rupee"),
    ("Brazil", "Brasilia", "real"),
    ("Mexico", "Mexico City", "peso"),
    ("China", "Beijing", "yuan"),
    ("Russia", "Moscow", "ruble"),
    ("South Korea", "Seoul", "won"),
    ("Switzerland", "Bern", "franc"),
    ("Poland", "Warsaw", "zloty"),
]


def _fields(ctx: GradingContext) -> list[str]:
    parts = (ctx.final_answer or "").split(";")
    return [p.strip().lower() for p in parts] if len(parts) == 2 else ["", ""]


class CountryEpisode(ToolEnv):
    rubric: ClassVar[Rubric] = Rubric(
        [
            Component(
                "capital", lambda c: float(_fields(c)[0] == c.task.answer[0].lower()), weight=0.5
            ),
            Component(
                "currency", lambda c: float(_fields(c)[1] == c.task.answer[1].lower()), weight=0.5
            ),
        ]
    )

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=f"{task.answer[0]}; {task.answer[1]}")]


class CountryEnv(EnvSpec):
    id = "gallery-country"
    environment = CountryEpisode
    default_limits = Limits(max_steps=1)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet(
            [
                Task(
                    id=f"country-{i}",
                    answer=[cap, cur],
                    prompt=f"Name the capital and the currency of {c}, as 'capital; currency'.",
                )
                for i, (c, cap, cur) in enumerate(COUNTRIES[: n or N])
            ],
            seed=seed,
        )


# --- 5. a model-free text game --------------------------------------------------------------
class GuessEpisode(ToolEnv):
    """Find the secret number with ``guess``: it says higher or lower."""

    rubric: ClassVar[Rubric] = Rubric(
        [Component("found", lambda c: float(_bare_int(c.final_answer) == c.task.answer))]
    )

    def oracle_actions(self, task: Task) -> list[Action]:
        return [
            Action(tool_calls=[ToolCall("guess", {"number": task.answer}, id="o1")]),
            Action(text=str(task.answer)),
        ]

    @tool
    def guess(self, number: int) -> str:
        """Guess the secret number.

        Args:
            number: Your guess, from 1 to 100.
        """
        assert self.task is not None
        secret = self.task.answer
        return "found it" if number == secret else ("higher" if secret > number else "lower")


class GuessEnv(EnvSpec):
    id = "gallery-guess"
    environment = GuessEpisode
    default_limits = Limits(max_steps=12)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        secrets = [37, 82, 15, 64, 29, 91, 53, 8, 70, 46]
        return TaskSet(
            [
                Task(
                    id=f"guess-{i}",
                    answer=s,
                    prompt="I picked a whole number from 1 to 100. Use the guess tool "
                    "to find it, then reply with the number only.",
                )
                for i, s in enumerate(secrets[: n or N])
            ],
            seed=seed,
        )
