"""Red team of ``triage``: answers that hedge between options in disguise, answers that hide
one option inside another word or markup, very long answers, agents that raise, return
malformed actions, claim an infrastructure failure or look for the hidden answer. Every episode
runs through the real engine. A test that passes is an attack the environment (or the engine)
defends; ``xfail(strict=True)`` marks a hole, its reason says where and how to close it."""

from __future__ import annotations

from typing import Any

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    EpisodeContext,
    InfraError,
    Observation,
    Status,
    Task,
    Trajectory,
)
from envlab.envs.triage import OPTIONS, TriageEnv, realized_reward
from envlab.rollout.config import EpisodeConfig
from envlab.rollout.driver import PlannedEpisode, episode_ids, run_episodes

N = 12


class Says(Agent):
    """Answers every ticket with ``answer`` (text), or with whatever ``answer`` is (malformed)."""

    name = "says"

    def __init__(self, answer: Any) -> None:
        self.answer = answer

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="says", harness="scripted:says")

    async def act(self, observation: Observation) -> Action:
        if isinstance(self.answer, BaseException):
            raise self.answer
        if isinstance(self.answer, str):
            return Action(text=self.answer)
        return self.answer  # type: ignore[no-any-return]


async def _play(factory: AgentClass, n: int = N, retries: int = 0) -> list[Trajectory]:
    spec = TriageEnv()
    tasks = list(spec.tasks(n=n, split="test"))
    plan = [
        PlannedEpisode(t, 0, episode_ids(spec.name, spec.content_hash(), t.id, 0, 0), factory)
        for t in tasks
    ]
    config = EpisodeConfig(max_retries=retries, retry_backoff=0.0)
    return await run_episodes(spec, plan, config=config, concurrency=4)


def _tasks(n: int = N) -> list[Task]:
    return list(TriageEnv().tasks(n=n, split="test"))


def _gated(trajs: list[Trajectory]) -> None:
    for t in trajs:
        assert t.status is Status.OK and t.scored
        assert t.reward == 0.0 and t.gated_by == "one_option"


# --- hedges: more than one option, however written, scores 0 ------------------------------------

HEDGES = {
    "negation": "not page_oncall but queue_team",
    "parenthesis": "queue_team (or page_oncall if it gets worse)",
    "code_block_and_text": "```\npage_oncall\n```\nActually: queue_team",
    "joined": "page_oncall_queue_team",
    "markdown_list": "- **queue_team**\n- ~~open_incident~~",
    "quote": "> open-incident\n\nqueue team",
    "zero_width_separator": "queue_team\u200bpage_oncall",
    "nbsp": "PAGE\u00a0ONCALL / queue team",
    "html": "<b>queue_team</b><!-- close_duplicate -->",
    "json": '{"answer": "queue_team", "fallback": "auto_remediate"}',
    "repeated_with_other": "queue_team " * 50 + "close-duplicate",
}


@pytest.mark.parametrize("answer", HEDGES.values(), ids=HEDGES.keys())
async def test_an_answer_naming_two_options_in_plain_sight_scores_zero(answer: str) -> None:
    _gated(await _play(AgentClass(Says, answer)))


# --- one option in markup is one option; one inside another word is none ---------------------

SINGLE = {
    "code_block": "```\nqueue_team\n```",
    "inline_code": "Answer: `queue_team`.",
    "bold": "**QUEUE_TEAM**",
    "json": '{"answer": "queue_team"}',
    "repeated": "queue_team queue-team Queue Team",
}


@pytest.mark.parametrize("answer", SINGLE.values(), ids=SINGLE.keys())
async def test_one_option_in_markup_earns_exactly_that_options_reward(answer: str) -> None:
    trajs = await _play(AgentClass(Says, answer))
    for task, t in zip(_tasks(), trajs, strict=True):
        assert t.gated_by is None
        assert t.reward == pytest.approx(realized_reward(task, "queue_team"))


EMBEDDED = {
    "prefix": "xqueue_team",
    "plural": "queue_teams",
    "suffix_digit": "page_oncall2",
    "agent_noun": "page_oncaller",
    "past": "auto_remediated",
    "camel": "CloseDuplicate",
    "url": "https://queueteam.example",
}


@pytest.mark.parametrize("answer", EMBEDDED.values(), ids=EMBEDDED.keys())
async def test_an_option_inside_another_word_names_no_option(answer: str) -> None:
    _gated(await _play(AgentClass(Says, answer)))


# --- disguised hedges: what a reader sees as two options, the grader reads as one -------------

DISGUISED = {
    "zero_width_inside": "queue_team pa\u200bge_oncall",
    "soft_hyphen_inside": "queue_team pa\u00adge_oncall",
    "fullwidth": "queue_team \uff50\uff41\uff47\uff45\uff3f\uff4f\uff4e\uff43\uff41\uff4c\uff4c",
    "cyrillic_a": "queue_team p\u0430ge_oncall",
}


@pytest.mark.parametrize("answer", DISGUISED.values(), ids=DISGUISED.keys())
async def test_an_answer_that_shows_two_options_in_disguise_scores_zero(answer: str) -> None:
    _gated(await _play(AgentClass(Says, answer), n=3))


# --- very long answers ---------------------------------------------------------------------


async def test_a_very_long_answer_is_graded_by_what_it_names() -> None:
    """~200 KB of filler: graded, and graded right (one option, or two)."""
    filler = "a " * 100_000
    [one] = await _play(AgentClass(Says, filler + "queue_team"), n=1)
    assert one.reward == pytest.approx(realized_reward(_tasks(1)[0], "queue_team"))
    [two] = await _play(AgentClass(Says, "queue_team " + filler + "page_oncall"), n=1)
    _gated([two])


# --- the agent's failures are its own, scored 0, never excluded -------------------------------


def _engine_hole(answer: Action, name: str, why: str) -> Any:
    """A malformed action the engine once let through (``why``): now the agent's failure."""
    return pytest.param(answer, id=name)


BROKEN = [
    pytest.param(ValueError("the agent's bug"), id="raises"),
    pytest.param(42, id="returns_int"),
    pytest.param(None, id="returns_none"),
    pytest.param({"text": "queue_team"}, id="returns_dict"),
    pytest.param(Action(text=b"queue_team"), id="text_not_str"),  # type: ignore[arg-type]
    _engine_hole(
        Action(text="queue_team", tool_calls="page_oncall"),  # type: ignore[arg-type]
        "tool_calls_not_list",
        "tool_calls that are not a list fail in the environment's step: env_error, excluded",
    ),
    _engine_hole(
        Action(text="queue_team", tool_calls=["page_oncall"]),  # type: ignore[list-item]
        "tool_calls_of_str",
        "tool calls that are not ToolCall fail in the environment's step: env_error, excluded",
    ),
    _engine_hole(
        Action(text="queue_team", info=None),  # type: ignore[arg-type]
        "info_none",
        "an info that is not a dict fails in _record (phase engine): infra_error, excluded",
    ),
]


@pytest.mark.parametrize("answer", BROKEN)
async def test_a_broken_agent_is_an_agent_error_scored_zero(answer: Any) -> None:
    trajs = await _play(AgentClass(Says, answer), n=4, retries=2)
    for t in trajs:
        assert t.status is Status.AGENT_ERROR and t.scored and t.reward == 0.0
        assert t.error is not None and t.error.kind == "agent" and t.attempts == 1


async def test_an_agent_cannot_dodge_its_grade_by_raising_infra_error() -> None:
    trajs = await _play(AgentClass(Says, InfraError("the model server is down")), n=4)
    for t in trajs:
        assert t.scored and t.reward == 0.0


# --- the hidden answer -------------------------------------------------------------------------


class Peek(Agent):
    """Looks for the hidden answer in everything the engine gives a non-privileged agent."""

    name = "peek"
    seen: list[dict[str, Any]] = []  # noqa: RUF012 (one list the test reads)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="peek", harness="scripted:peek")

    async def start(self, ctx: EpisodeContext) -> None:
        Peek.seen.append(
            {"task": ctx.task, "oracle": ctx.oracle_actions, "text": repr(ctx) + ctx.prompt}
        )

    async def act(self, observation: Observation) -> Action:
        Peek.seen[-1]["text"] += repr(observation)
        return Action(text="queue_team")


async def test_a_non_privileged_agent_never_gets_the_hidden_answer() -> None:
    Peek.seen.clear()
    trajs = await _play(AgentClass(Peek), n=20)
    assert len(Peek.seen) == 20
    for s in Peek.seen:
        assert s["task"] is None and s["oracle"] is None
        assert "posterior" not in s["text"] and "outcome" not in s["text"]
    assert all(not t.agent.privileged for t in trajs)


async def test_the_oracle_is_recorded_as_privileged() -> None:
    trajs = await _play(AgentClass(OracleAgent), n=5)
    assert all(t.agent.privileged and t.scored for t in trajs)
    assert {t.steps[-1].action.text for t in trajs} <= set(OPTIONS)
