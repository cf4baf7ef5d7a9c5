"""Time that is not the agent's (``core.clock.not_agent_time``) is not on its step or episode clock.

Each test forces a wait several times longer than the limit it must not count against, while
the work itself takes a small fraction of the limit; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    Limits,
    Observation,
    Status,
    ToolCall,
    credit_not_agent_time,
    not_agent_seconds,
    not_agent_time,
)
from envlab.rollout import EpisodeConfig, rollout
from envlab.rollout.deadlines import Deadlines
from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore
from tests.support.envs import EchoEnv, EchoEpisode
from tests.support.play import echo_with, play

STEP = 0.5
"""The step limit: generous next to an action that takes no time, a third of the forced wait."""
HOLD = 3 * STEP


class SharedModel:
    """One model for many episodes: a lock that one caller holds at a time, as an engine does."""

    def __init__(self, work_s: float = 0.0) -> None:
        self.lock = asyncio.Lock()
        self.work_s = work_s
        self.served = 0

    async def answer(self) -> str:
        async with not_agent_time("model queue"):
            await self.lock.acquire()
        try:
            await asyncio.sleep(self.work_s)  # the model thinking: the agent's time
            self.served += 1
            return "ok"
        finally:
            self.lock.release()


class QueuedAgent(Agent):
    """Asks the shared model once per step, then answers what it said."""

    name = "queued"

    def __init__(self, model: SharedModel, tool_steps: int = 0) -> None:
        self.model, self.tool_steps = model, tool_steps
        self._left = tool_steps

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name)

    async def act(self, observation: Observation) -> Action:
        text = await self.model.answer()
        if self._left > 0:
            self._left -= 1
            return Action(tool_calls=[ToolCall("repeat", {"text": text})])
        return Action(text=text)


async def hold(model: SharedModel, seconds: float) -> None:
    async with model.lock:
        await asyncio.sleep(seconds)


async def one(agent: Agent, **limits: object):  # type: ignore[no-untyped-def]
    """One echo episode, no retries; ``limits``: ``Limits`` fields and ``wait_timeout``."""
    return await play(EchoEnv(), agent, **limits)  # type: ignore[arg-type]


async def test_concurrent_episodes_queued_on_one_model_do_not_time_out(tmp_path: Path) -> None:
    model = SharedModel()
    holder = asyncio.create_task(hold(model, HOLD))
    await asyncio.sleep(0)  # the holder has the model before any episode asks
    env = EchoEnv(n=8)
    result = await rollout(
        env,
        AgentClass(QueuedAgent, model, tool_steps=1),
        env.tasks(),
        out_dir=tmp_path / "run",
        concurrency=8,
        config=EpisodeConfig(
            overrides=Limits.overrides(step_timeout_s=STEP, episode_timeout_s=2 * STEP)
        ),
    )
    await holder
    errors = [t.error for t in TrajectoryStore(tmp_path / "run" / TRAJECTORIES_FILE).load()]
    assert [r.status for r in result.records] == [Status.OK] * 8, errors
    assert all(r.reward == 1.0 for r in result.records)
    assert model.served == 16


async def test_waited_time_is_recorded_and_a_slow_agent_still_times_out() -> None:
    model = SharedModel()
    holder = asyncio.create_task(hold(model, HOLD))
    await asyncio.sleep(0)
    t = await one(QueuedAgent(model), step_timeout_s=STEP)
    await holder
    assert t.status is Status.OK and t.reward == 1.0
    assert t.timings.waited_s > 0.0

    slow = SharedModel(work_s=60.0)  # served at once, but thinks far past the limit
    t = await one(QueuedAgent(slow), step_timeout_s=STEP)
    assert t.status is Status.TIMEOUT
    assert t.error is not None and (t.error.kind, t.error.phase) == ("timeout", "act")
    assert "step 0 took longer than step_timeout_s=0.5s while the agent was acting" in (
        t.error.message
    )


async def test_the_episode_limit_is_extended_by_the_waits_too() -> None:
    model = SharedModel()
    holder = asyncio.create_task(hold(model, HOLD))
    await asyncio.sleep(0)
    t = await one(QueuedAgent(model, tool_steps=2), step_timeout_s=None, episode_timeout_s=STEP)
    await holder
    assert t.status is Status.OK and t.n_steps == 3


async def test_nested_waits_and_waits_in_child_tasks_pause_the_clock_once() -> None:
    class Parallel(Agent):
        name = "parallel"

        @property
        def spec(self) -> AgentSpec:
            return AgentSpec(name=self.name)

        async def act(self, observation: Observation) -> Action:
            async def wait(seconds: float) -> None:
                async with not_agent_time("connection retry"), not_agent_time("model queue"):
                    await asyncio.sleep(seconds)

            await asyncio.gather(wait(HOLD), wait(HOLD / 2))
            await asyncio.create_task(wait(HOLD / 2))
            return Action(text="ok")

    t = await one(Parallel(), step_timeout_s=STEP)
    assert t.status is Status.OK and t.reward == 1.0


async def test_credited_time_is_taken_off_the_clock() -> None:
    class Crediting(Agent):
        """Loses time to something it only learns afterwards was not its own (a failed try)."""

        name = "crediting"

        @property
        def spec(self) -> AgentSpec:
            return AgentSpec(name=self.name)

        async def act(self, observation: Observation) -> Action:
            for _ in range(3):
                await asyncio.sleep(STEP / 2)
                credit_not_agent_time(STEP / 2, "failed model request")
            return Action(text="ok")

    t = await one(Crediting(), step_timeout_s=STEP)
    assert t.status is Status.OK and t.timings.waited_s > 0.0


async def test_waits_are_bounded_by_wait_timeout_as_infra_error() -> None:
    class Stuck(Agent):
        name = "stuck"

        @property
        def spec(self) -> AgentSpec:
            return AgentSpec(name=self.name)

        async def act(self, observation: Observation) -> Action:
            async with not_agent_time("model queue"):
                await asyncio.sleep(60)
            return Action(text="ok")

    t = await one(Stuck(), step_timeout_s=STEP, wait_timeout=STEP)
    assert t.status is Status.INFRA_ERROR and not t.scored
    assert t.error is not None and t.error.kind == "infra"
    assert "wait_timeout=0.5s" in t.error.message and "model queue" in t.error.message
    # bounded and recorded even when the agent has no time limits at all
    t = await one(Stuck(), step_timeout_s=None, episode_timeout_s=None, wait_timeout=STEP)
    assert t.status is Status.INFRA_ERROR
    assert t.error is not None and "wait_timeout=0.5s" in t.error.message
    assert t.timings.waited_s > 0.0


async def test_waits_do_not_stretch_the_reset_limit() -> None:
    class WaitingReset(EchoEpisode):
        async def on_reset(self, task, seed):  # type: ignore[no-untyped-def]
            async with not_agent_time("sandbox start"):
                await asyncio.sleep(60)

    t = await one(QueuedAgent(SharedModel()), reset_timeout_s=STEP)
    assert t.status is Status.OK  # sanity: the plain env resets at once
    t = await play(echo_with(WaitingReset), QueuedAgent(SharedModel()), reset_timeout_s=STEP)
    assert t.status is Status.INFRA_ERROR and t.error is not None
    assert "reset took longer than reset_timeout_s=0.5s" in t.error.message


async def test_outside_an_episode_nothing_is_paused() -> None:
    assert not_agent_seconds() == 0.0
    async with not_agent_time("model queue"):
        await asyncio.sleep(0)
    with not_agent_time("model queue"):
        pass
    credit_not_agent_time(1.0, "nothing")
    assert not_agent_seconds() == 0.0


async def test_deadlines_clock_offsets_the_cap() -> None:
    """The episode deadline handed back by ``set`` is on the task's clock: after a pause the
    same cap still means the same amount of the agent's time."""
    dl = Deadlines()
    me = asyncio.current_task()
    assert me is not None
    clock = dl.agent_clock(me, wait_limit=None)
    clock.start()
    try:
        cap = dl.set(me, 30.0, "episode", pausable=True)
        assert cap is not None
        clock.pause("model queue")
        await asyncio.sleep(STEP / 5)
        clock.resume()
        assert clock.waited_s > 0.0
        second = dl.set(me, 60.0, "step", cap=cap, cap_reason="episode", pausable=True)
        assert second == pytest.approx(cap)
    finally:
        clock.close()
        dl.clear(me)
