"""gym:ENV_ID against gymnasium itself: the same actions, through envlab and through
``gymnasium.make`` with the same seed, give the same observations, return and termination."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

gym = pytest.importorskip("gymnasium")

from envlab.adapters.gymnasium_text import (  # noqa: E402
    GymTextEnv,
    catalog,
    env_ids,
    gymnasium_env,
)
from envlab.core import Action, ConfigError, ToolCall  # noqa: E402
from envlab.core.rubric import reward_range_of, validate_reward  # noqa: E402
from envlab.envs import load_env  # noqa: E402

ENVS = ["FrozenLake-v1", "FrozenLake8x8-v1", "Taxi-v4", "CliffWalkingSlippery-v1", "Blackjack-v1"]


def direct(env_id: str, seed: int, actions: list[int], max_steps: int) -> list[tuple]:
    env = gym.make(env_id, max_episode_steps=max_steps)
    obs, _ = env.reset(seed=seed)
    trace, ret = [(obs, 0.0, False, False)], 0.0
    for a in actions:
        obs, r, term, trunc, _ = env.step(a)
        ret += float(r)
        trace.append((obs, ret, term, trunc))
        if term or trunc:
            break
    return trace


def through_envlab(spec: GymTextEnv, task, actions: list[int]) -> tuple[list[tuple], float]:
    async def run() -> tuple[list[tuple], float]:
        env = spec.new_episode()
        await env.reset(task)
        st = env.state()
        trace = [(st["observation"], st["return"], st["terminated"], st["truncated"])]
        for a in actions:
            name = spec.family.actions[a]
            res = await env.step(Action(tool_calls=[ToolCall("act", {"action": name})]))
            st = env.state()
            obs = st["observation"]
            trace.append((tuple(obs) if isinstance(obs, list) else obs, st["return"],
                          st["terminated"], st["truncated"]))  # fmt: skip
            if res.done:
                break
        else:
            await env.step(Action(text="stop"))
        reward = validate_reward(await env.grade(), reward_range_of(task.metadata))
        return trace, reward.total

    return asyncio.run(run())


@pytest.mark.parametrize("env_id", ENVS)
def test_replay_matches_gymnasium(env_id: str) -> None:
    spec = gymnasium_env(f"gym:{env_id}")
    r = random.Random(env_id)
    for task in spec.tasks(n=4):
        seed = task.metadata["seed"]
        actions = [r.randrange(len(spec.family.actions)) for _ in range(spec.max_steps + 5)]
        trace, reward = through_envlab(spec, task, actions)
        want = direct(env_id, seed, actions, spec.max_steps)
        assert [tuple(x) for x in trace] == [tuple(x) for x in want]
        low, high = task.metadata["reward_range"]
        ret, ended = want[-1][1], want[-1][2] or want[-1][3]
        assert ended  # random play runs to the end (or the step limit)
        assert reward == pytest.approx((ret - low) / (high - low))


@pytest.mark.parametrize("env_id", ENVS)
def test_oracle_reaches_the_best_return(env_id: str) -> None:
    spec = gymnasium_env(f"gym:{env_id}")
    for task in spec.tasks(n=3):
        oracle = spec.new_episode().oracle_actions(task)
        actions = [spec.family.actions.index(a.tool_calls[0].arguments["action"])
                   for a in oracle if a.tool_calls]  # fmt: skip
        _, reward = through_envlab(spec, task, actions)
        assert reward == 1.0
        assert (
            direct(env_id, task.metadata["seed"], actions, spec.max_steps)[-1][1]
            == (task.metadata["reward_range"][1])
        )


def test_leaving_early_scores_the_worst() -> None:
    spec = gymnasium_env("gym:Taxi-v4")
    task = spec.tasks(n=1)[0]
    _, reward = through_envlab(spec, task, [])
    assert reward == 0.0


def test_catalog_names_and_hash() -> None:
    entries = catalog(tasks=1)
    assert {e.name for e in entries} == {f"gym:{i}" for i in env_ids()}
    assert all(e.loaded for e in entries), entries
    a = load_env("gym:FrozenLake-v1", variant={"is_slippery": False})
    assert (
        a.content_hash()
        == load_env("gym:FrozenLake-v1", variant={"is_slippery": False}).content_hash()
    )
    assert a.content_hash() != load_env("gym:FrozenLake-v1").content_hash()


def test_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="not a toy-text environment"):
        load_env("gym:CartPole-v1")
    with pytest.raises(ConfigError, match="reward_schedule"):
        load_env("gym:FrozenLake-v1", variant={"reward_schedule": [1, -1, 0]})


async def test_vet_runs_the_computed_oracle_and_pays_moves_that_are_the_task(
    tmp_path: Path,
) -> None:
    """A game's tasks have no answer, but the adapter computes the best play: vet runs it as
    the oracle, so a blind probe that happens to play the best move (Blackjack: stick on 20)
    did the task, not a grader paid by actions (it was a false quarantine)."""
    from envlab.envs import load_env
    from envlab.vet.runner import VetConfig, vet_environment

    cfg = VetConfig(oracle_runs=2, samples=2, group_size=2, concurrency=2, tasks=6)
    report = await vet_environment(load_env("gym:Blackjack-v1"), out_dir=tmp_path, config=cfg)
    assert report.verdict_counts["ok"] == 6, [
        (t.task_id, t.verdict, [c.summary for c in t.checks if c.status == "fail"])
        for t in report.tasks
    ]
    oracle = {c.status for t in report.tasks for c in t.checks if c.name == "oracle"}
    assert oracle == {"pass"}
