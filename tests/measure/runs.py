"""Real runs for measurement tests: ``envlab eval`` through the Python API, into a folder."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from envlab.agents import load_agent
from envlab.agents.scripted import OracleAgent
from envlab.cli.evaluate import evaluate
from envlab.core import Action, AgentSpec, EpisodeContext, Observation
from envlab.envs import load_env


def make_run(
    out: Path,
    env: str = "arith",
    agent: str = "random",
    *,
    tasks: int = 30,
    samples: int = 1,
    seed: int = 0,
    env_args: dict[str, Any] | None = None,
    must_pass: list[str] | None = None,
    agent_args: dict[str, Any] | None = None,
) -> Path:
    spec = load_env(env, **(env_args or {}))
    factory = load_agent(agent, **(agent_args or {}))

    async def run() -> None:
        try:
            await evaluate(
                spec,
                factory,
                spec.tasks(seed=seed, n=tasks),
                out_dir=out,
                samples=samples,
                seed=seed,
                command=["envlab", "eval", env, "--agent", agent],
                must_pass=must_pass,
            )
        finally:
            await factory.aclose()

    # a thread of its own: playwright's sync API keeps an event loop in the test's thread
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, run()).result()
    return out


class SkilledAgent(OracleAgent):
    """Solves a task with probability ``skill ** level`` (harder arith levels fail more often).

    A privileged stand-in for a model of middling skill: its scores vary across tasks and
    samples, as a real agent's do. Used as ``tests.measure.runs:SkilledAgent``.
    """

    name = "skilled"

    def __init__(self, skill: float = 0.7) -> None:
        super().__init__()
        self.skill = skill
        self._solve = True

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=f"skilled-{self.skill}", harness="tests:skilled", privileged=True)

    async def start(self, ctx: EpisodeContext) -> None:
        await super().start(ctx)
        level = ctx.task.metadata.get("level", 1) if ctx.task is not None else 1
        self._solve = random.Random(f"{ctx.seed}:{self.skill}").random() < self.skill**level

    async def act(self, observation: Observation) -> Action:
        if self._solve:
            return await super().act(observation)
        return Action(text="The answer is -1.")
