"""rg:DATASET against reasoning-gym's own scoring: envlab's reward on the right, a wrong and a
malformed answer equals ``score_answer`` called directly on the dataset's own entry."""

from __future__ import annotations

import asyncio
import os

import pytest

rg = pytest.importorskip("reasoning_gym")

from reasoning_gym.utils import extract_answer  # noqa: E402

from envlab.adapters.reasoning_gym import (  # noqa: E402
    ReasoningGymEnv,
    catalog,
    dataset_names,
    reasoning_gym_env,
)
from envlab.core import Action, ConfigError  # noqa: E402
from envlab.envs import load_env  # noqa: E402

SAMPLE = [
    "basic_arithmetic",
    "leg_counting",
    "graph_color",
    "word_sorting",
    "sudoku",
    "gsm_symbolic",
]
SKIP_ALL = {"composite", "list_functions"}  # needs a config / not deterministic (catalog says)


def replies(entry: dict) -> dict[str, str]:
    right = entry["answer"] if entry["answer"] is not None else ""
    return {
        "right": f"Let me think.\n<answer>{right}</answer>",
        "wrong": "<answer>certainly not this 123</answer>",
        "malformed": f"the answer is {right}",  # no tags: extract_answer gives None
        "empty_tags": "<answer></answer>",
    }


def envlab_reward(spec: ReasoningGymEnv, task, text: str) -> float:
    async def run() -> float:
        env = spec.new_episode()
        await env.reset(task)
        await env.step(Action(text=text))
        return (await env.grade()).total

    return asyncio.run(run())


def check_dataset(name: str, n: int) -> None:
    spec = reasoning_gym_env(f"rg:{name}", size=n)
    direct = rg.create_dataset(name, seed=0, size=n)  # the same entries, made by reasoning-gym
    for task in spec.tasks(n=n):
        i = task.metadata["rg_index"]
        entry = direct[i]
        assert task.prompt == entry["question"]
        for kind, text in replies(entry).items():
            try:
                want: float | type = direct.score_answer(extract_answer(text), entry)
            except Exception:  # the source's scorer crashes on this answer: the answer's
                want = 0.0  # failure, scored 0 (isolated.py), never an excluded episode
            try:
                got: float | type = envlab_reward(spec, task, text)
            except Exception as e:
                got = type(e)
            assert got == want, (name, i, kind, got, want)


@pytest.mark.parametrize("name", SAMPLE)
def test_reward_is_score_answer(name: str) -> None:
    check_dataset(name, 6)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("ENVLAB_SLOW"), reason="every dataset: ENVLAB_SLOW=1")
def test_reward_is_score_answer_every_dataset() -> None:
    for name in dataset_names():
        if name not in SKIP_ALL:
            check_dataset(name, 5)


def test_oracle_scores_one_by_the_source() -> None:
    spec = reasoning_gym_env("rg:leg_counting", size=10)
    for task in spec.tasks(n=10):
        oracle = spec.new_episode().oracle_actions(task)[0].text or ""
        assert envlab_reward(spec, task, oracle) == 1.0


def test_config_passes_through_and_hash_is_stable() -> None:
    a = load_env("rg:basic_arithmetic", size=7, seed=3, min_terms=3, max_terms=3)
    b = load_env("rg:basic_arithmetic", size=7, seed=3, min_terms=3, max_terms=3)
    assert a.content_hash() == b.content_hash()
    assert [t.prompt for t in a.tasks()] == [t.prompt for t in b.tasks()]
    direct = rg.create_dataset("basic_arithmetic", seed=3, size=7, min_terms=3, max_terms=3)
    assert [t.prompt for t in a.tasks()] == [direct[i]["question"] for i in range(7)]
    assert a.content_hash() != load_env("rg:basic_arithmetic", size=7, seed=4).content_hash()
    train = [t.prompt for t in a.tasks(split="train")]
    assert train != [t.prompt for t in a.tasks()]


def test_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match=r"no dataset 'leg_countin'.*rg:leg_counting"):
        load_env("rg:leg_countin")
    with pytest.raises(ConfigError, match="nonsense"):
        load_env("rg:leg_counting", nonsense=1)
    with pytest.raises(ConfigError, match="Must specify at least one dataset"):
        load_env("rg:composite")


def test_catalog_reports_every_dataset() -> None:
    entries = {e.name: e for e in catalog(tasks=1)}
    assert len(entries) == len(dataset_names())
    assert not entries["rg:composite"].loaded
    assert "Must specify at least one dataset" in entries["rg:composite"].reason
    assert not entries["rg:list_functions"].loaded
    assert "not deterministic" in entries["rg:list_functions"].reason
    assert entries["rg:leg_counting"].loaded and entries["rg:leg_counting"].oracle == 1.0
