"""Wrappers: an episode around an episode, composable; a wrapped spec with its own stable hash;
the engine's own limits (``StepLimit``, ``EpisodeTimeLimit``, ``OrderEnforcing``) are wrappers."""

from __future__ import annotations

import time
from typing import Any

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    ConfigError,
    Environment,
    EpisodeLimits,
    EpisodeOrderError,
    EpisodeTimeExceeded,
    EpisodeTimeLimit,
    Limits,
    Observation,
    OrderEnforcing,
    Reward,
    Status,
    StepLimit,
    StepResult,
    Task,
    ToolCall,
    WrappedSpec,
    Wrapper,
)
from envlab.envs.calc import CalcEnv, CalcEpisode
from envlab.rollout.config import wrap_for_limits
from tests.support.envs import EchoEnv
from tests.support.play import hash_in_subprocess, play

CALC = "from envlab.envs.calc import CalcEnv\nfrom envlab.core import StepLimit"
TASK = Task(id="t", prompt="count")


class Counter(Environment):
    """A bare episode with no order checks of its own: counts steps, done after ``done_at``."""

    def __init__(self, done_at: int = 100) -> None:
        self.done_at = done_at
        self.n = self.resets = 0

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        self.resets += 1
        return Observation(text=task.prompt)

    async def step(self, action: Action) -> StepResult:
        self.n += 1
        return StepResult(Observation(text=str(self.n)), 0.0, done=self.n >= self.done_at)

    def state(self) -> dict[str, Any]:
        return {"n": self.n}

    async def grade(self) -> Reward:
        return Reward(total=1.0)


def layers(env: Environment) -> list[Environment]:
    """``env`` and everything it wraps, outermost first."""
    out = [env]
    while isinstance(out[-1], Wrapper):
        out.append(out[-1].env)
    return out


# --- the wrapped spec's hash ---------------------------------------------------------------


def test_a_wrapped_specs_hash_is_the_same_in_other_processes() -> None:
    here = CalcEnv().wrap(StepLimit, max_steps=3).content_hash()
    spec = "CalcEnv().wrap(StepLimit, max_steps=3)"
    first = hash_in_subprocess(CALC, spec, hash_seed=1)
    second = hash_in_subprocess(CALC, spec, hash_seed=2)
    assert first == second == here


def test_a_wrapped_specs_hash_names_the_wrapper_and_its_parameters() -> None:
    calc = CalcEnv()
    three = calc.wrap(StepLimit, max_steps=3).content_hash()
    assert three == CalcEnv().wrap(StepLimit, max_steps=3).content_hash()
    assert three != calc.content_hash(), "the unwrapped spec is another definition"
    assert three != calc.wrap(StepLimit, max_steps=4).content_hash()
    assert three != CalcEnv(max_ops=2).wrap(StepLimit, max_steps=3).content_hash()
    assert calc.wrap(OrderEnforcing).content_hash() not in (three, calc.content_hash())
    limited = calc.wrap(EpisodeTimeLimit, seconds=3)
    assert limited.content_hash() != three, "same parameter value, another wrapper"
    stacked = calc.wrap(StepLimit, max_steps=3).wrap(OrderEnforcing)
    swapped = calc.wrap(OrderEnforcing).wrap(StepLimit, max_steps=3)
    assert len({stacked.content_hash(), swapped.content_hash(), three}) == 3


@pytest.mark.parametrize(
    "params",
    [{"seconds": 5.0, "clock": time.monotonic}, {"seconds": object()}],
    ids=["function", "object"],
)
def test_a_wrapper_parameter_that_is_not_json_is_a_config_error(params: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="parameters of EpisodeTimeLimit must be plain JSON"):
        CalcEnv().wrap(EpisodeTimeLimit, **params)


def test_a_composed_stack_lists_its_wrappers_and_keeps_the_inner_definition() -> None:
    inner = CalcEnv(max_ops=2)
    spec = inner.wrap(StepLimit, max_steps=3).wrap(OrderEnforcing)
    assert isinstance(spec, WrappedSpec)
    assert spec.wrappers == ["StepLimit(max_steps=3)", "OrderEnforcing()"]
    assert spec.name == "calc" and spec.description == inner.description
    assert spec.config == inner.config
    tasks = spec.tasks(seed=4, n=3)
    assert [t.model_dump() for t in tasks] == [t.model_dump() for t in inner.tasks(seed=4, n=3)]
    assert spec.limits(tasks[0]) == inner.limits(tasks[0])
    env = spec.new_episode()
    assert [type(e) for e in layers(env)] == [OrderEnforcing, StepLimit, CalcEpisode]
    assert isinstance(env.unwrapped, CalcEpisode) and env.unwrapped.spec is inner


# --- episodes of a wrapped spec ----------------------------------------------------------------


async def test_two_episodes_of_a_wrapped_spec_never_share_state() -> None:
    spec = CalcEnv(min_ops=2, max_ops=2).wrap(StepLimit, max_steps=2).wrap(OrderEnforcing)
    task = spec.tasks(n=1)[0]
    a, b = spec.new_episode(), spec.new_episode()
    assert len(layers(a)) == len(layers(b)) == 3
    for x, y in zip(layers(a), layers(b), strict=True):
        assert x is not y, f"two episodes share their {type(x).__name__}"
    assert a.unwrapped is not b.unwrapped
    await a.reset(task)
    await b.reset(task)
    fresh = b.state()
    first, second, answer = a.oracle_actions(task)
    await a.step(first)
    assert a.state()["results"] and a.state()["n_steps"] == 1
    assert b.state() == fresh, "stepping one episode changed the other"
    ended = await a.step(second)
    assert ended.truncated and ended.info["truncated_by"] == "StepLimit(max_steps=2)"
    with pytest.raises(EpisodeOrderError):
        await a.step(answer)
    # b has its own step count and its own order: its first step is its first
    res = await b.step(first)
    assert not res.truncated and "truncated_by" not in res.info
    assert b.state()["n_steps"] == 1 and b.state()["results"] == a.state()["results"][:1]


async def test_step_limit_truncates_at_n() -> None:
    env = StepLimit(Counter(), max_steps=3)
    await env.reset(TASK)
    for _ in range(2):
        res = await env.step(Action(text="x"))
        assert not res.truncated and not res.done and "truncated_by" not in res.info
    res = await env.step(Action(text="x"))
    assert res.truncated and not res.done
    assert res.info["truncated_by"] == "StepLimit(max_steps=3)"


async def test_an_episode_that_ends_by_itself_at_the_limit_is_not_truncated() -> None:
    env = StepLimit(Counter(done_at=3), max_steps=3)
    await env.reset(TASK)
    for _ in range(3):
        res = await env.step(Action(text="x"))
    assert res.done and not res.truncated and "truncated_by" not in res.info


def test_limits_below_one_step_or_second_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="max_steps >= 1, got 0"):
        StepLimit(Counter(), max_steps=0)
    with pytest.raises(ConfigError, match="seconds > 0, got 0"):
        EpisodeTimeLimit(Counter(), seconds=0)


async def test_order_enforcing_refuses_calls_out_of_order() -> None:
    inner = Counter(done_at=1)
    env = OrderEnforcing(inner)
    with pytest.raises(EpisodeOrderError, match=r"step\(\) called before reset\(\)"):
        await env.step(Action(text="x"))
    with pytest.raises(EpisodeOrderError, match=r"grade\(\) called before reset\(\)"):
        await env.grade()
    assert inner.n == 0, "a refused call never reaches the environment"
    await env.reset(TASK)
    with pytest.raises(EpisodeOrderError, match=r"reset\(\) called twice.*spec\.new_episode"):
        await env.reset(TASK)
    assert inner.resets == 1
    assert (await env.step(Action(text="x"))).done
    with pytest.raises(EpisodeOrderError, match=r"step\(\) called after the episode ended"):
        await env.step(Action(text="x"))
    assert inner.n == 1
    assert (await env.grade()).total == 1.0, "grading an ended episode is in order"


async def test_order_enforcing_ends_the_episode_at_a_truncation_too() -> None:
    env = OrderEnforcing(StepLimit(Counter(), max_steps=1))
    await env.reset(TASK)
    assert (await env.step(Action(text="x"))).truncated
    with pytest.raises(EpisodeOrderError, match="after the episode ended"):
        await env.step(Action(text="x"))


async def test_order_enforcing_refuses_a_regrade_before_reset() -> None:
    with pytest.raises(EpisodeOrderError, match="before reset"):
        await OrderEnforcing(Counter()).regrade()


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class SlowReset(Counter):
    """Resetting takes 50 s of the fake clock (building a workspace: not the agent's time)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock

    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        self.clock.now += 50.0
        return await super().reset(task, seed)


@pytest.mark.parametrize("wrapper", ["EpisodeTimeLimit", "EpisodeLimits"])
async def test_episode_time_limit_refuses_a_late_step(wrapper: str) -> None:
    """The composable wrapper and the engine's one wrapper alike."""
    clock = FakeClock()
    inner = SlowReset(clock)
    limit = EpisodeTimeLimit if wrapper == "EpisodeTimeLimit" else EpisodeLimits
    env = limit(inner, seconds=10.0, clock=clock)
    await env.reset(TASK)
    assert env.elapsed() == 0.0, "the reset's own time is not the agent's"
    clock.now += 9.5
    assert not (await env.step(Action(text="x"))).done
    clock.now += 1.0
    with pytest.raises(EpisodeTimeExceeded, match=r"used 10\.5s of its time.*10\.0s"):
        await env.step(Action(text="x"))
    assert inner.n == 1, "the late step is not applied"


class LateAgent(Agent):
    """Acts at once, then blocks past the episode's limit before its final answer: the step
    arrives late, and the environment's own step is quick."""

    name = "late"

    def __init__(self, late_s: float) -> None:
        self.late_s, self.acted = late_s, 0

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name)

    async def act(self, observation: Observation) -> Action:
        self.acted += 1
        if self.acted == 1:
            return Action(tool_calls=[ToolCall("repeat", {"text": "o"})])
        time.sleep(self.late_s)  # never yields: the engine's own deadline cannot stop it
        return Action(text="ok")


async def test_a_step_after_the_episodes_time_is_a_timeout_in_the_engine() -> None:
    t = await play(EchoEnv(), LateAgent(late_s=0.4), episode_timeout_s=0.2)
    assert t.status is Status.TIMEOUT and t.scored
    assert t.error is not None and (t.error.kind, t.error.phase) == ("timeout", "step")
    assert "EpisodeTimeExceeded" in t.error.message and "EpisodeTimeLimit" in t.error.message
    assert t.n_steps == 1 and t.reward == 0.0, "the late final answer was not applied"


# --- wrappers pass everything on, and the engine uses them ------------------------------------


async def test_a_wrapper_passes_every_method_on_explicitly() -> None:
    spec = CalcEnv(min_ops=1, max_ops=1)
    task = spec.tasks(n=1)[0]
    env = spec.wrap(StepLimit, max_steps=5).wrap(OrderEnforcing).new_episode()
    inner = env.unwrapped
    assert [t.name for t in env.tools] == [t.name for t in inner.tools]
    assert env.system_prompt() == inner.system_prompt()
    obs = await env.reset(task)
    assert obs.text == task.prompt
    assert env.oracle_actions(task) == inner.oracle_actions(task)
    for action in env.oracle_actions(task):
        await env.step(action)
    assert env.state() == inner.state() and env.state()["done"]
    assert (await env.grade()).total == 1.0 and (await env.regrade()).total == 1.0
    assert "__getattr__" not in vars(Wrapper), "nothing is forwarded implicitly"
    assert not hasattr(env, "results") and hasattr(inner, "results")


def test_the_engines_limits_are_one_wrapper_of_all_three() -> None:
    episode = CalcEnv().new_episode()
    env = wrap_for_limits(episode, Limits(max_steps=7, episode_timeout_s=30.0))
    assert [type(e) for e in layers(env)] == [EpisodeLimits, CalcEpisode]
    assert isinstance(env, EpisodeLimits) and (env.max_steps, env.seconds) == (7, 30.0)
    assert env.unwrapped is episode
    bare = wrap_for_limits(episode, Limits(max_steps=None, episode_timeout_s=None))
    assert isinstance(bare, EpisodeLimits) and (bare.max_steps, bare.seconds) == (None, None)


async def test_the_engines_one_wrapper_checks_as_the_three_composed_do() -> None:
    """``EpisodeLimits`` is ``OrderEnforcing(StepLimit(EpisodeTimeLimit(env)))`` in one layer:
    the same order checks, truncation and late-step refusal, with the same messages."""
    inner = Counter()
    env = EpisodeLimits(inner, max_steps=2)
    with pytest.raises(EpisodeOrderError, match=r"step\(\) called before reset\(\)"):
        await env.step(Action(text="x"))
    for what in ("grade", "regrade"):
        with pytest.raises(EpisodeOrderError, match=rf"^{what}\(\) called before reset\(\)"):
            await getattr(env, what)()
    await env.reset(TASK)
    with pytest.raises(EpisodeOrderError, match=r"reset\(\) called twice.*spec\.new_episode"):
        await env.reset(TASK)
    assert not (await env.step(Action(text="x"))).truncated
    res = await env.step(Action(text="x"))
    assert res.truncated and res.info["truncated_by"] == "StepLimit(max_steps=2)"
    with pytest.raises(EpisodeOrderError, match="after the episode ended"):
        await env.step(Action(text="x"))
    assert inner.n == 2 and inner.resets == 1 and (await env.grade()).total == 1.0
    done = EpisodeLimits(Counter(done_at=1), max_steps=1)
    await done.reset(TASK)
    res = await done.step(Action(text="x"))
    assert res.done and not res.truncated and "truncated_by" not in res.info
    with pytest.raises(ConfigError, match="max_steps >= 1, got 0"):
        EpisodeLimits(Counter(), max_steps=0)
    with pytest.raises(ConfigError, match="seconds > 0, got 0"):
        EpisodeLimits(Counter(), seconds=0)


async def test_a_wrapped_spec_runs_in_the_engine_under_its_own_hash() -> None:
    spec = CalcEnv(min_ops=2, max_ops=2).wrap(StepLimit, max_steps=1)
    t = await play(spec, AgentClass(OracleAgent))
    assert t.status is Status.TRUNCATED and t.n_steps == 1
    assert t.steps[-1].info["truncated_by"] == "StepLimit(max_steps=1)"
    assert t.env_id == "calc" and t.env_hash == spec.content_hash()
    assert t.env_hash != CalcEnv(min_ops=2, max_ops=2).content_hash()
