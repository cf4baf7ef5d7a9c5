from __future__ import annotations

from pathlib import Path

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentFactory,
    AgentSpec,
    ConfigError,
    EnvSpec,
    NotFoundError,
    Observation,
    ToolCall,
)
from envlab.envs import load_env
from envlab.envs.arith import ArithEnv
from envlab.envs.calc import CalcEnv
from envlab.rollout import rollout


def test_arith_tasks_are_deterministic_and_cover_levels() -> None:
    env = ArithEnv()
    a, b = env.tasks(seed=3, n=30), env.tasks(seed=3, n=30)
    assert [t.model_dump() for t in a] == [t.model_dump() for t in b]
    assert [t.prompt for t in env.tasks(seed=4, n=30)] != [t.prompt for t in a]
    assert {t.metadata["level"] for t in a} == {1, 2, 3}
    assert all(str(t.answer) not in t.prompt.split("Give")[1] for t in a)


async def test_arith_grades_the_final_answer() -> None:
    spec = ArithEnv(level=1)
    task = spec.tasks(n=1)[0]
    env = spec.new_episode()
    await env.reset(task)
    res = await env.step(Action(text=f"Let me think... the answer is {task.answer}"))
    assert res.done and (await env.grade()).total == 1.0
    env = spec.new_episode()
    await env.reset(task)
    res = await env.step(Action(text=f"the answer is {task.answer + 1}"))
    assert res.done and (await env.grade()).total == 0.0


async def test_calc_rewards_tool_use_separately() -> None:
    spec = CalcEnv(min_ops=1, max_ops=1)
    task = spec.tasks(n=1)[0]
    (op, a, b) = task.metadata["steps"][0]
    env = spec.new_episode()
    await env.reset(task)
    res = await env.step(Action(text=str(task.answer)))  # right answer, no tools
    assert res.done and res.reward == 0.0  # steps reward 0; the grade comes after
    reward = await env.grade()
    assert reward.total == pytest.approx(0.8)
    assert reward.components == {"correct": 1.0, "computed_with_tools": 0.0}
    env = spec.new_episode()
    await env.reset(task)
    await env.step(Action(tool_calls=[ToolCall(op, {"a": a, "b": b}, id="c1")]))
    await env.step(Action(text=str(task.answer)))
    assert (await env.grade()).total == pytest.approx(1.0)


def test_calc_tools_have_schemas_from_signatures() -> None:
    specs = {s.name: s for s in CalcEnv().new_episode().tools}
    assert set(specs) == {"add", "sub", "mul", "div"}
    div = specs["div"].to_openai()["function"]
    assert div["description"] == "Divide a by b."
    assert div["parameters"]["required"] == ["a", "b"]
    assert div["parameters"]["properties"]["b"] == {
        "type": "number",
        "description": "The divisor (not zero).",
    }


def test_registry_finds_entry_points_and_paths() -> None:
    assert isinstance(load_env("arith"), ArithEnv)
    assert isinstance(load_env("envlab.envs.calc:CalcEnv", max_ops=2), CalcEnv)
    with pytest.raises(NotFoundError, match="Known environments: arith, calc"):
        load_env("nope")
    with pytest.raises(ConfigError, match="bad config for environment 'arith': level: "):
        load_env("arith", level=7)
    with pytest.raises(NotFoundError, match="no attribute"):
        load_env("envlab.envs.calc:Nope")


class EchoPromptAgent(Agent):
    """Replies with the task's prompt (or a part of it) as its final answer: solves nothing."""

    name = "echo-prompt"

    def __init__(self, part: str = "all") -> None:
        self.part = part

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=f"{self.name}:{self.part}", harness="scripted:echo")

    async def act(self, observation: Observation) -> Action:
        text = observation.text
        if self.part == "expression":  # calc: "Compute EXPR using the calculator tools ..."
            text = text.removeprefix("Compute ").split(" using ")[0]
        elif self.part == "question":  # arith: the prompt without its last sentence
            text = text.rsplit(" Give ", 1)[0]
        return Action(text=text)


async def _mean_reward(env: EnvSpec, agent: AgentFactory, out: Path, n: int = 500) -> list[float]:
    result = await rollout(env, agent, env.tasks(n=n), out_dir=out, concurrency=16)
    assert result.new_episodes == n
    return [r.reward for r in result.records if r.reward is not None]


@pytest.mark.parametrize(
    ("env", "part"),
    [
        (CalcEnv(), "all"),
        (CalcEnv(), "expression"),
        (ArithEnv(), "all"),
        (ArithEnv(), "question"),
    ],
    ids=["calc-prompt", "calc-expression", "arith-prompt", "arith-question"],
)
async def test_echoing_the_prompt_earns_nothing(env: EnvSpec, part: str, tmp_path: Path) -> None:
    rewards = await _mean_reward(env, AgentClass(EchoPromptAgent, part), tmp_path / "run")
    assert len(rewards) == 500 and max(rewards) == 0.0


@pytest.mark.parametrize("env", [CalcEnv(), ArithEnv()], ids=["calc", "arith"])
async def test_the_oracle_still_earns_everything(env: EnvSpec, tmp_path: Path) -> None:
    rewards = await _mean_reward(env, AgentClass(OracleAgent), tmp_path / "run")
    assert len(rewards) == 500 and min(rewards) == 1.0
