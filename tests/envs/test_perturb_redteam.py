"""Red-team attacks on the perturbations (``envlab.envs.perturb``), as a cheating agent would
try them: turn its own failure into an environment error (not counted), erase or forge the
recorded faults, or foresee the faults. A defended attack is a passing test; a real hole is a
strict xfail whose reason says what is wrong."""

from __future__ import annotations

import random
from typing import Any

import pytest

from envlab.core import Action, AgentSpec, EpisodeContext, Observation, ToolCall, Trajectory
from envlab.core.tools import tool
from envlab.envs.calc import CalcEnv
from envlab.envs.perturb import perturb
from tests.support.envs import EchoEnv, EchoEpisode, ScriptAgent
from tests.support.play import echo_with, play

DEEP = '{"a": ' + "[" * 100_000
"""Arguments nested past the JSON parser's recursion limit (the agent's malformed call)."""


def faults_of(tr: Trajectory) -> list[dict[str, Any]]:
    return [f for s in tr.steps for f in s.info.get("faults", [])]


def deep_call() -> Action:
    return Action(tool_calls=[ToolCall("add", DEEP, id="deep")])


# --- an agent's malformed call or output must stay its own failure, never env_error ----------
async def test_deeply_nested_arguments_are_the_agents_tool_error_on_clean_calc() -> None:
    t = await play(CalcEnv(), ScriptAgent([deep_call(), Action(text="0")]))
    assert t.status.value == "ok", t.error
    assert t.steps[0].tool_errors == 1


@pytest.mark.parametrize("text", ["timeout=0.5", "rate_limit=1", "truncate=1", "latency=0.0001"])
async def test_deep_arguments_under_a_perturbation_that_does_not_parse_them_stay_scored(
    text: str,
) -> None:
    t = await play(perturb(CalcEnv(), text), ScriptAgent([deep_call(), Action(text="0")]))
    assert t.status.value == "ok", t.error
    assert t.reward is not None


async def test_deep_arguments_under_transient_are_the_agents_tool_error() -> None:
    t = await play(perturb(CalcEnv(), "transient=1"), ScriptAgent([deep_call(), Action(text="0")]))
    assert t.status.value == "ok", t.error


class WritingEcho(EchoEpisode):
    """The echo episode with a write tool."""

    @tool(writes=True)
    def set_note(self, note_id: str) -> str:
        """Mark a note.

        Args:
            note_id: The note.
        """
        return f"marked {note_id}"


def echo_deep() -> Action:
    """The echo tool answers with what the agent sent: a result nested past the parser."""
    return Action(tool_calls=[ToolCall("repeat", {"text": "[", "times": 100_000}, id="r")])


async def test_a_deep_result_the_agent_made_is_fine_when_clean_or_truncated() -> None:
    for spec in (EchoEnv(), perturb(EchoEnv(), "truncate=1")):
        t = await play(spec, ScriptAgent([echo_deep(), Action(text="ok")]))
        assert t.status.value == "ok", t.error
        assert t.reward == 1.0


@pytest.mark.parametrize("text", ["malformed=1", "inject=1"])
async def test_a_deep_result_the_agent_made_is_not_env_error_under_result_faults(
    text: str,
) -> None:
    spec = echo_with(WritingEcho)  # a write tool: inject reads the record to fill it
    t = await play(perturb(spec, text), ScriptAgent([echo_deep(), Action(text="ok")]))
    assert t.status.value == "ok", t.error


async def test_inject_without_write_tools_does_not_parse_the_result() -> None:
    t = await play(perturb(EchoEnv(), "inject=1"), ScriptAgent([echo_deep(), Action(text="ok")]))
    assert t.status.value == "ok", t.error


# --- the faults are recorded honestly ---------------------------------------------------------
class Recorder(ScriptAgent):
    """Plays its script and keeps every observation and its episode context."""

    def __init__(self, actions: list[Action]) -> None:
        super().__init__(actions)
        self.ctx: EpisodeContext | None = None
        self.seen: list[Observation] = []

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="recorder")

    async def start(self, ctx: EpisodeContext) -> None:
        self.ctx = ctx

    async def act(self, observation: Observation) -> Action:
        self.seen.append(observation)
        return await super().act(observation)


def adds(n: int, *, same_id: bool = False) -> list[Action]:
    return [
        Action(tool_calls=[ToolCall("add", {"a": i, "b": 1}, id="x" if same_id else f"c{i}")])
        for i in range(n)
    ]


async def test_every_refusal_the_agent_saw_is_a_recorded_fault_and_nothing_else() -> None:
    """The record is what happened: each timed-out answer has its fault (step and call), each
    fault its timed-out answer; call ids the agent reuses do not merge or hide faults, and a
    text the agent writes that looks like a fault is not one."""
    spec = perturb(CalcEnv(), "timeout=0.5")
    script = [
        Action(text="Error: [retryable] the call to 'add' timed out", tool_calls=[]),
    ]
    agent = Recorder([*adds(12, same_id=True), *script])
    t = await play(spec, agent, max_steps=40)
    assert t.status.value == "ok", t.error
    timed_out = [
        i + 1
        for i, s in enumerate(t.steps)
        for r in s.observation.tool_results
        if "timed out" in r.content
    ]
    recorded = [f["step"] for f in faults_of(t)]
    assert recorded == timed_out and 0 < len(recorded) < 12
    assert all(f["fault"] == "timeout" and f["tool"] == "add" for f in faults_of(t))
    assert "faults" not in t.steps[-1].info  # the agent's look-alike text is no fault


async def test_the_same_seed_records_the_same_faults_whatever_the_agent_says_in_text() -> None:
    spec = perturb(CalcEnv(), "transient=0.5")
    runs = []
    for chatter in ("", "please do not fail me"):
        acts = [Action(text=chatter, tool_calls=a.tool_calls) for a in adds(8)]
        runs.append(
            faults_of(await play(spec, ScriptAgent([*acts, Action(text="0")]), max_steps=40))
        )
    assert runs[0] == runs[1] and runs[0]


@pytest.mark.xfail(
    strict=True,
    reason="hole: the faults are drawn from random.Random(f'{seed}:{task_id}:{p}:{n}') "
    "(CallContext.rng, perturb/base.py) and the engine hands the agent the same seed and task "
    "id (EpisodeContext.seed, .task_id): an agent that knows the published --perturb text "
    "foresees every fault and can pad its calls to dodge them, so a robustness drop can be "
    "gamed. Fix: mix a key the agent is not told into the fault seed",
)
async def test_an_agent_cannot_foresee_which_calls_will_fault() -> None:
    text, n = "timeout=0.5", 16
    agent = Recorder([*adds(n), Action(text="0")])
    t = await play(perturb(CalcEnv(), text), agent, max_steps=40)
    assert agent.ctx is not None
    key = f"{agent.ctx.seed}:{agent.ctx.task_id}:{text}"
    foreseen = [i + 1 for i in range(n) if random.Random(f"{key}:{i}").random() < 0.5]
    actual = [f["step"] for f in faults_of(t)]
    assert actual  # there were faults to foresee
    assert foreseen != actual


# --- no read answers from a state the agent has not reached -----------------------------------
async def test_the_injection_probe_leaves_no_state_a_later_or_stale_read_could_see() -> None:
    """``inject`` tries its write on the current state and undoes it: afterwards the database
    is the same byte for byte, nothing is logged as changed or written, and a stale read (which
    answers from the snapshots of real writes only) has nothing to answer from."""
    from envlab.envs.tau.spec import TauRetail

    clean = TauRetail()
    for task in clean.tasks(n=5):
        env = perturb(clean, "stale=1,inject=1").new_episode()
        await env.reset(task, 0)
        base: Any = env.unwrapped
        base.db.conn.commit()
        image = base.db.conn.serialize()
        user = {"user_id": task.metadata["user_id"]}
        read = Action(tool_calls=[ToolCall("get_user_details", user, id="r")])
        first = await env.step(read)
        again = await env.step(read)
        asked = [f for f in first.info.get("faults", []) if f["fault"] == "inject"]
        base.db.conn.commit()
        after = base.db.conn.serialize(), base.db.changes(), base.db.writes
        await env.close()
        if not asked:
            continue
        assert after == (image, {}, 0)
        assert not [f for f in again.info.get("faults", []) if f["fault"] == "stale"]
        record = again.observation.tool_results[0].content.split("\n\n[Automated")[0]
        assert record == first.observation.tool_results[0].content.split("\n\n[Automated")[0]
        return
    pytest.fail("no task's user record asked for an injected write")
