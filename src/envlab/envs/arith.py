"""``arith``: procedurally generated arithmetic word problems in three difficulty levels."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from envlab.core import (
    Action,
    Component,
    EnvSpec,
    GradingContext,
    Limits,
    Rubric,
    Task,
    TaskSet,
    ToolEnv,
)
from envlab.envs.answers import extract_number, format_number, numbers_equal

NAMES = ["Ava", "Ben", "Chen", "Dara", "Eli", "Fatima", "Gus", "Hana", "Ivan", "Jon", "Kira", "Lee"]
ITEMS = ["apple", "book", "marble", "sticker", "pencil", "card", "coin", "shell", "stamp", "egg"]

Problem = tuple[str, float]


def _level1(r: random.Random) -> Problem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(2, 60), r.randint(2, 40)
    kind = r.randrange(4)
    if kind == 0:
        return (
            f"{name} has {a} {item}s and finds {b} more. How many {item}s does {name} have?",
            a + b,
        )
    if kind == 1:
        a, b = max(a, b) + 1, min(a, b)
        return f"{name} had {a} {item}s and gave away {b}. How many {item}s are left?", a - b
    if kind == 2:
        a, b = r.randint(2, 12), r.randint(2, 12)
        return f"One box holds {a} {item}s. How many {item}s are in {b} boxes?", a * b
    q, b = r.randint(2, 15), r.randint(2, 9)
    return (
        f"{name} shares {q * b} {item}s equally among {b} friends. How many does each friend get?",
        q,
    )


def _level2(r: random.Random) -> Problem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    kind = r.randrange(3)
    if kind == 0:
        packs, per, eaten = r.randint(2, 9), r.randint(3, 12), r.randint(1, 10)
        eaten = min(eaten, packs * per - 1)
        text = (
            f"{name} buys {packs} packs of {item}s with {per} in each pack, then loses {eaten}. "
            f"How many {item}s does {name} have now?"
        )
        return text, packs * per - eaten
    if kind == 1:
        each, friends, extra = r.randint(2, 12), r.randint(2, 8), r.randint(1, 20)
        text = (
            f"{name} has {each * friends} {item}s and splits them equally into {friends} bags. "
            f"Then {extra} more {item}s are added to one bag. How many {item}s are in that bag?"
        )
        return text, each + extra
    start, weeks, per_week = r.randint(5, 50), r.randint(2, 10), r.randint(2, 15)
    text = (
        f"{name} starts with {start} {item}s and collects {per_week} more every week for {weeks} "
        f"weeks. How many {item}s does {name} have at the end?"
    )
    return text, start + weeks * per_week


def _level3(r: random.Random) -> Problem:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    kind = r.randrange(3)
    if kind == 0:
        price_cents, qty = r.randint(105, 995), r.randint(3, 12)
        pct = r.choice([10, 20, 25, 50])
        total = price_cents * qty * (100 - pct) / 100 / 100
        bill = 20 * (int(total // 20) + 1)
        text = (
            f"A {item} costs ${price_cents / 100:.2f}. {name} buys {qty} of them with a {pct}% "
            f"discount on the total and pays with ${bill}. How much change, in dollars, does "
            f"{name} get?"
        )
        return text, round(bill - total, 2)
    if kind == 1:
        s1, t1, s2, t2 = r.randint(30, 90), r.randint(1, 5), r.randint(30, 90), r.randint(1, 5)
        back = r.choice([10, 20, 30])
        text = (
            f"A train travels at {s1} km/h for {t1} hours, then at {s2} km/h for {t2} hours, "
            f"then returns {back} km back. How far from the start is it, in km?"
        )
        return text, s1 * t1 + s2 * t2 - back
    w, h, cost = r.randint(3, 20), r.randint(3, 20), r.randint(2, 30)
    border = r.randint(1, 2)
    text = (
        f"A garden is {w} m by {h} m. A path {border} m wide is built all around the outside. "
        f"Paving costs ${cost} per square metre. What does the path cost, in dollars?"
    )
    area = (w + 2 * border) * (h + 2 * border) - w * h
    return text, area * cost


LEVELS: dict[int, Callable[[random.Random], Problem]] = {1: _level1, 2: _level2, 3: _level3}


SYSTEM_PROMPT = "Solve the problem. End with 'The answer is N.' where N is a number."


def _correct(ctx: GradingContext) -> float:
    """The agent's final number is the answer; text copied from the problem is not a number of
    the agent's (an echo of "gave away 15" is not the answer 15)."""
    got = extract_number(ctx.final_answer, not_from=[ctx.task.prompt, SYSTEM_PROMPT])
    return float(numbers_equal(got, float(ctx.task.answer)))


class ArithEpisode(ToolEnv):
    """One arithmetic word problem; the reward is 1 for the right final number, else 0."""

    rubric = Rubric([Component("correct", _correct, description="final number matches")])

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=f"The answer is {format_number(float(task.answer))}.")]


class ArithConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    level: Literal[1, 2, 3] | None = None
    """One level of difficulty, or all three in turn."""
    size: int = Field(1000, ge=1)


class ArithEnv(EnvSpec):
    """Seeded arithmetic word problems in 3 levels, answered in one step."""

    id = "arith"
    description = "Seeded arithmetic word problems, 3 levels; exact answer, tolerant parsing."
    Config = ArithConfig
    environment = ArithEpisode
    default_limits = Limits(max_steps=1)
    config: ArithConfig

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        count = self.config.size if n is None else n
        tasks = []
        for i in range(count):
            r = random.Random(f"arith:{split}:{seed}:{i}")
            level = self.config.level or (i % 3) + 1
            text, answer = LEVELS[level](r)
            tasks.append(
                Task(
                    id=f"arith-{split}-{seed}-{i:05d}",
                    prompt=text + " Give the final answer as a number.",
                    answer=answer,
                    metadata={"level": level},
                    split=split,
                )
            )
        return TaskSet(tasks, seed=seed, name=self.id)
