"""Tools cannot stall the engine: sync tools run off the event loop, one call of an episode at a
time, each within a budget; a call over budget is the agent's tool error, ends its episode and
is graded 0 without reading the state its thread may still change.

No wall-clock assertions: the tests assert on statuses, results and what other episodes did
while a tool ran (the spinning tool's own deadline only keeps the old, inline behaviour from
hanging the suite)."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any

import pytest

from envlab.core import (
    Action,
    AgentClass,
    Component,
    EnvSpec,
    GradingContext,
    Limits,
    Reward,
    Rubric,
    Status,
    Task,
    TaskSet,
    ToolCall,
    ToolEnv,
)
from envlab.core import tool_budget as tb
from envlab.core.tool_budget import ToolBudget, ToolOverrun, run_in_thread
from envlab.core.tools import tool
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes
from tests.support.envs import ScriptAgent

HONEST_CALLS: list[str] = []
"""Every honest ``tick`` call, in order, from every episode (process-wide, server included)."""
SPIN_SAW: list[int] = []
"""For each ``spin`` call: how many honest calls ran while it was spinning."""
SPIN_SAFETY_S = 3.0
"""A spin ends on its own after this (the old, inline runner would otherwise hang the test)."""


def _graded_ok(ctx: GradingContext) -> float:
    return float(ctx.final_answer == "ok" and ctx.state.get("won") is None)


class SpinEpisode(ToolEnv):
    """Honest episodes ``tick``; the hostile one calls ``spin``, a CPU-bound sync tool."""

    rubric = Rubric([Component("answered_ok", _graded_ok)])

    def __init__(self, spec: EnvSpec | None = None) -> None:
        super().__init__(spec)
        self.won: str | None = None

    def state(self) -> dict[str, Any]:
        return {**super().state(), "won": self.won}

    @tool
    def tick(self, n: int) -> str:
        """Record an honest call.

        Args:
            n: Its number.
        """
        HONEST_CALLS.append(f"{self.task.id if self.task else '?'}:{n}")
        return f"tick {n}"

    @tool
    def spin(self) -> str:
        """Spin on the CPU in pure Python, then claim the win (a zombie's late write)."""
        start, end = len(HONEST_CALLS), time.monotonic() + SPIN_SAFETY_S
        SPIN_SAW.append(0)
        while time.monotonic() < end:
            SPIN_SAW[-1] = len(HONEST_CALLS) - start
        self.won = "the zombie"
        return "spun"


class SpinEnv(EnvSpec):
    """Eight honest tasks and a hostile one whose tools get a tiny budget."""

    id = "spin"
    environment = SpinEpisode
    default_limits = Limits(max_steps=40)
    hostile_limits = Limits(max_steps=40, tool_call_s=0.3, tool_cpu_s=0.3)

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = [Task(id=f"honest-{i}", prompt="tick, then say ok", answer="ok") for i in range(8)]
        return TaskSet([*tasks, Task(id="hostile", prompt="spin", answer="ok")])

    def limits(self, task: Task) -> Limits:
        return self.hostile_limits if task.id == "hostile" else self.default_limits


class PacedAgent(ScriptAgent):
    """A scripted agent that takes a moment per action, as a model does."""

    async def act(self, observation: Any) -> Action:
        await asyncio.sleep(0.01)
        return await super().act(observation)


def honest_script(n: int = 20) -> list[Action]:
    calls = [Action(tool_calls=[ToolCall("tick", {"n": i}, id=f"t{i}")]) for i in range(n)]
    return [*calls, Action(text="ok")]


HOSTILE_SCRIPT = [Action(tool_calls=[ToolCall("spin", {}, id="s")]), Action(text="ok")]


async def run_side_by_side(spec: EnvSpec) -> dict[str, Any]:
    """The eight honest episodes and the hostile one at once; trajectories by task id."""
    planned = []
    for t in spec.tasks():
        script = HOSTILE_SCRIPT if t.id == "hostile" else honest_script()
        ids = episode_ids(spec.name, spec.content_hash(), t.id, 0, 0)
        planned.append(PlannedEpisode(t, 0, ids, AgentClass(PacedAgent, script)))
    cfg = EpisodeConfig(max_retries=0)
    return {t.task_id: t for t in await run_episodes(spec, planned, config=cfg, concurrency=9)}


def assert_contained(by_task: dict[str, Any]) -> None:
    """The honest episodes finished ``ok`` while the hostile tool ran; the hostile one is the
    agent's tool error: scored 0, counted, its zombie's late write not graded."""
    hostile = by_task.pop("hostile")
    assert SPIN_SAW and SPIN_SAW[-1] > 0, "no honest call ran while the hostile tool spun"
    for t in by_task.values():
        assert t.status is Status.OK and t.reward == 1.0, (t.task_id, t.status, t.error)
    assert hostile.status is Status.OK and hostile.status.scored
    assert hostile.reward == 0.0 and hostile.tool_errors == 1
    assert "tool_call_s" in hostile.info["grade"]["tool_overrun"]
    (result,) = hostile.steps[0].observation.tool_results
    assert result.is_error and "was stopped" in result.content and hostile.n_steps == 1


# -- the engine ---------------------------------------------------------------------------------


async def test_a_spinning_tool_beside_eight_honest_episodes_is_the_agents_tool_error() -> None:
    HONEST_CALLS.clear()
    assert_contained(await run_side_by_side(SpinEnv()))


# -- the runner ---------------------------------------------------------------------------------


async def _ticks_while(aw: Any) -> tuple[Any, int]:
    """Await ``aw`` while a loop task counts its own turns; (result, turns)."""
    turns = 0

    async def count() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    counter = asyncio.create_task(count())
    try:
        return await aw, turns
    finally:
        counter.cancel()


def _spin_until(flag: threading.Event, seen: list[str]) -> str:
    seen.append("started")
    try:
        while not flag.is_set():
            pass
        return "done"
    finally:
        seen.append("left")


async def test_a_sync_call_runs_off_the_loop() -> None:
    flag, seen = threading.Event(), []
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, flag.set)  # set by the loop itself: it must keep running
    value, turns = await _ticks_while(
        run_in_thread(lambda: _spin_until(flag, seen), ToolBudget(None, None))
    )
    assert value == "done" and turns > 0 and seen == ["started", "left"]


@pytest.mark.parametrize(
    ("budget", "named"),
    [(ToolBudget(0.1, None), "tool_call_s"), (ToolBudget(None, 0.1), "tool_cpu_s")],
)
async def test_a_call_over_budget_is_stopped_in_its_thread(budget: ToolBudget, named: str) -> None:
    never, seen = threading.Event(), []
    with pytest.raises(ToolOverrun, match=named):
        await run_in_thread(lambda: _spin_until(never, seen), budget)
    await _until(lambda: seen == ["started", "left"], "the thread left the tool")


async def test_a_cancelled_caller_abandons_the_call() -> None:
    never, seen = threading.Event(), []
    task = asyncio.create_task(run_in_thread(lambda: _spin_until(never, seen), ToolBudget()))
    await _until(lambda: seen == ["started"], "the call started")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _until(lambda: seen == ["started", "left"], "the thread left the tool")


async def test_the_tool_sees_its_callers_context_and_its_errors_pass() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("v", default="unset")
    var.set("episode")
    assert await run_in_thread(var.get, ToolBudget()) == "episode"
    with pytest.raises(KeyError, match="nope"):
        await run_in_thread(lambda: {}["nope"], ToolBudget())


async def test_a_stuck_worker_holds_its_slot_and_others_wait_for_a_free_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tb, "_pool", tb._Pool(1))
    release, order = threading.Event(), []

    def stuck() -> str:  # blocked in C: the injected exception waits for it
        release.wait()
        order.append("stuck left")
        return "late"

    with pytest.raises(ToolOverrun):
        await run_in_thread(stuck, ToolBudget(0.05, None))
    waiting = asyncio.create_task(run_in_thread(lambda: order.append("next ran"), ToolBudget()))
    await asyncio.sleep(0.05)
    assert order == [] and not waiting.done()  # the one worker is still the zombie's
    release.set()
    await waiting
    assert order == ["next ran"]  # the zombie was stopped at its next instruction
    await _until(lambda: tb._pool.busy == 0, "both calls left their thread")
    assert tb._pool.threads == 1


# -- the episode --------------------------------------------------------------------------------


async def _hostile_episode() -> SpinEpisode:
    spec = SpinEnv()
    env = spec.new_episode()
    assert isinstance(env, SpinEpisode)
    await env.reset(spec.tasks().by_id("hostile"))
    return env


async def test_an_overrun_ends_the_episode_and_refuses_later_calls() -> None:
    env = await _hostile_episode()
    later = ToolCall("tick", {"n": 1}, id="after")
    result = await env.step(Action(tool_calls=[ToolCall("spin", {}, id="s"), later]))
    assert result.done and result.info["tool_errors"] == 1
    assert "tool_call_s" in result.info["tool_overrun"]
    assert [r.tool_call_id for r in result.observation.tool_results] == ["s"]  # later not run
    refused = await env.run_tool(later)
    assert refused.is_error and "was not run" in refused.content
    assert env.tool_log[0]["overrun"] and env.tool_log[0]["arguments"] == {}


async def test_an_overrun_is_graded_0_whatever_its_thread_does_later() -> None:
    env = await _hostile_episode()
    await env.step(Action(tool_calls=[ToolCall("spin", {}, id="s")]))
    env.final_answer = "ok"  # even a right answer, and a state the zombie might change
    reward = await env.grade()
    assert reward.total == 0.0 and reward.components == {"answered_ok": 0.0}
    assert "tool_overrun" in reward.details and (await env.regrade()).total == 0.0
    await asyncio.sleep(0.1)
    assert env.won is None  # stopped at its next instruction: the late write never happened


async def test_an_episode_that_grades_its_own_way_is_still_graded_0_after_an_overrun() -> None:
    """Subclasses grade by overriding ``score`` (replays add their counts, task folders run
    their verifier); the budget's check sits in ``grade`` around it, for all of them."""

    class OwnScore(SpinEpisode):
        async def score(self) -> Reward:
            return Reward(total=1.0, components={"answered_ok": 1.0})  # would pay anything

    class OwnScoreEnv(SpinEnv):
        environment = OwnScore

    spec = OwnScoreEnv()
    env = spec.new_episode()
    await env.reset(spec.tasks().by_id("hostile"))
    await env.step(Action(tool_calls=[ToolCall("spin", {}, id="s")]))
    assert (await env.grade()).total == 0.0 and (await env.regrade()).total == 0.0


async def test_calls_of_one_episode_run_one_after_another_in_order() -> None:
    spec = SpinEnv()
    env = spec.new_episode()
    await env.reset(spec.tasks()[0])
    inside: list[int] = []

    def overlapping(n: int) -> str:
        inside.append(n)
        time.sleep(0.01)  # releases the GIL: another call could start here if allowed
        assert inside[-1] == n, "two calls of one episode overlapped"
        return str(n)

    env.tick = overlapping  # type: ignore[method-assign]
    calls = [ToolCall("tick", {"n": i}, id=f"c{i}") for i in range(4)]
    result = await env.step(Action(tool_calls=calls))
    assert [r.content for r in result.observation.tool_results] == ["0", "1", "2", "3"]
    concurrent = await asyncio.gather(*(env.run_tool(c) for c in calls))
    assert [r.content for r in concurrent] == ["0", "1", "2", "3"] and not any(
        r.is_error for r in concurrent
    )


async def _until(cond: Any, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        await asyncio.sleep(0.01)


class ClosingEpisode(SpinEpisode):
    """Releases a resource in ``close`` that its blocked tool still uses (as τ's SQLite)."""

    close_grace_s = 30.0

    def __init__(self, spec: EnvSpec | None = None) -> None:
        super().__init__(spec)
        self.release, self.order = threading.Event(), []

    @tool
    def block(self) -> str:
        """Block inside one C call (a lock): the injected exception waits for it."""
        self.release.wait()
        self.order.append("thread left")
        return "late"

    async def close(self) -> None:
        self.order.append("closed")


async def _overrun_in_c(grace: float) -> ClosingEpisode:
    env = ClosingEpisode(SpinEnv())
    env.close_grace_s = grace
    await env.reset(SpinEnv().tasks().by_id("hostile"))
    result = await env.step(Action(tool_calls=[ToolCall("block", {}, id="b")]))
    assert result.done and "tool_call_s" in result.info["tool_overrun"]
    return env


async def test_close_waits_for_a_thread_still_inside_the_episode() -> None:
    env = await _overrun_in_c(grace=30.0)
    asyncio.get_running_loop().call_later(0.05, env.release.set)
    await env.close()
    assert env.order == ["closed"]  # after the thread left: stopped at its next instruction


async def test_past_its_grace_close_runs_when_the_thread_ends() -> None:
    env = await _overrun_in_c(grace=0.01)
    await env.close()
    assert env.order == []  # not under the thread's feet
    env.release.set()
    await _until(lambda: env.order == ["closed"], "the deferred close")


async def test_a_step_deadline_during_a_tool_call_is_the_agents_timeout_graded_0() -> None:
    from tests.support.play import play

    spec = SpinEnv()  # an honest task's budget (60 s): the step's deadline fires first
    t = await play(spec, ScriptAgent(list(HOSTILE_SCRIPT)), spec.tasks()[0], step_timeout_s=0.2)
    assert t.status is Status.TIMEOUT and t.reward == 0.0
    assert "cancelled while it ran" in t.info["grade"]["tool_overrun"]


async def test_the_users_overrides_reach_the_tool_budget() -> None:
    """The budget is the episode's limits (the user's overrides over the task's), in the engine
    and through ``envlab serve``'s sessions alike (both wrap with ``wrap_for_limits``)."""

    class Lenient(SpinEnv):
        hostile_limits = Limits(max_steps=40)  # the task itself sets the defaults (60 s, 10 s)

    spec = Lenient()
    task = next(t for t in spec.tasks() if t.id == "hostile")
    ids = episode_ids(spec.name, spec.content_hash(), task.id, 0, 0)
    cfg = EpisodeConfig(max_retries=0, overrides=Limits.overrides(tool_call_s=0.2, tool_cpu_s=0.2))
    [t] = await run_episodes(
        spec, [PlannedEpisode(task, 0, ids, AgentClass(PacedAgent, HOSTILE_SCRIPT))], config=cfg
    )
    assert t.reward == 0.0 and t.tool_errors == 1, (t.status, t.error)
    assert "0.2" in t.info["grade"]["tool_overrun"]
