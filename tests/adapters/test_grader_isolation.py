"""reasoning-gym grades some answers by evaluating them: the answer is code that runs in the
grader. The attack, first on reasoning-gym alone (its flaw, reproduced with no envlab), then
through envlab, where the grader runs jailed in a forked child (adapters/isolated.py)."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

rg = pytest.importorskip("reasoning_gym")

from envlab.adapters import isolated  # noqa: E402
from envlab.adapters.reasoning_gym import reasoning_gym_env  # noqa: E402
from envlab.core import Action, Status  # noqa: E402
from tests.support.envs import ScriptAgent  # noqa: E402
from tests.support.play import play  # noqa: E402

EVAL_DATASETS = ["string_insertion", "spiral_matrix", "binary_matrix", "n_queens"]


def _payload(path: Path) -> str:
    return f"open({str(path)!r}, 'w').write('ran') and []"


@pytest.mark.parametrize("name", EVAL_DATASETS)
def test_reasoning_gym_runs_the_answer_as_code(name: str, tmp_path: Path) -> None:
    """reasoning-gym 0.1.25 alone: ``score_answer`` calls ``eval`` on the agent's answer."""
    d = rg.create_dataset(name, seed=0, size=1)
    d.score_answer(_payload(tmp_path / "ran"), d[0])
    assert (tmp_path / "ran").read_text() == "ran"


def test_sympy_graders_run_the_answer_as_code_too(tmp_path: Path) -> None:
    d = rg.create_dataset("countdown", seed=0, size=1)
    answer = f"__import__('pathlib').Path({str(tmp_path / 'ran')!r}).touch() or 1"
    d.score_answer(answer, d[0])
    assert (tmp_path / "ran").exists()


def test_string_insertion_answers_are_mostly_the_input_unchanged() -> None:
    """Random strings over five letters rarely hold one of its four-letter patterns: echoing
    the given string is the right answer on most entries (what vet reports as a leak)."""
    d = rg.create_dataset("string_insertion", seed=0, size=200)
    echoed = [e for e in d if e["answer"] == e["question"].strip().rsplit(": ", 1)[1]]
    assert len(echoed) > 150
    assert all(d.score_answer(e["answer"], e) == 1.0 for e in echoed)


async def _episode(name: str, text: str):  # type: ignore[no-untyped-def]
    spec = reasoning_gym_env(f"rg:{name}", size=2)
    return await play(spec, ScriptAgent([Action(text=text)]))


@pytest.mark.parametrize("name", [*EVAL_DATASETS, "countdown"])
async def test_through_envlab_the_answer_runs_nowhere(name: str, tmp_path: Path) -> None:
    """Each attack scores what a harmless wrong answer scores, changes nothing on disk or in
    envlab's process, and the reference answer still scores 1 afterwards."""
    baseline = (await _episode(name, "<answer>[]</answer>")).reward
    calls = [
        _payload(tmp_path / "ran"),
        f"__import__('pathlib').Path({str(tmp_path / 'ran')!r}).touch() or 1",
        "setattr(__import__('builtins'), 'PWNED', 1) or []",
        "[c for c in ().__class__.__base__.__subclasses__()]",
    ]
    for code in calls:
        t = await _episode(name, f"<answer>{code}</answer>")
        assert t.status is Status.OK and t.reward == baseline, (code, t.status, t.reward)
        assert not (tmp_path / "ran").exists() and not hasattr(builtins, "PWNED")
    if name != "countdown":  # its reference is one of many answers; the oracle tests cover it
        spec = reasoning_gym_env(f"rg:{name}", size=2)
        task = spec.tasks(n=1)[0]
        oracle = spec.new_episode().oracle_actions(task)
        assert (await play(spec, ScriptAgent(oracle), task)).reward == 1.0


async def test_a_grader_that_fails_on_the_answer_scores_it_zero() -> None:
    """prime_factorization's scorer raises on a non-numeric answer: before, the episode was
    the grader's failure and excluded, so an unsure agent could dodge its 0 by answering junk."""
    t = await _episode("prime_factorization", "<answer>not a number</answer>")
    assert t.status is Status.OK and t.reward == 0.0
    assert "grader raised" in str(t.info.get("grade", t.info))


async def test_an_answer_that_burns_the_cpu_is_the_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(isolated, "CPU_S", 1)
    t = await _episode("string_insertion", "<answer>[9**9**9**9]</answer>")
    assert t.status is Status.OK and t.reward == 0.0


async def test_served_the_answer_runs_nowhere_either(tmp_path: Path) -> None:
    """The same attack through ``envlab serve`` (a real server on 127.0.0.1): the server grades
    in its jail, the client gets the harmless wrong answer's reward, nothing is written."""
    pytest.importorskip("fastapi")
    from envlab.envs import load_env
    from envlab.serve.server import ServerThread

    with ServerThread(reasoning_gym_env("rg:string_insertion", size=2), max_sessions=2) as srv:
        remote = load_env(f"ws://{srv.host}:{srv.port}")
        task = remote.tasks(n=1)[0]
        harmless = await play(remote, ScriptAgent([Action(text="<answer>[]</answer>")]), task)
        attack = f"<answer>{_payload(tmp_path / 'ran')}</answer>"
        t = await play(remote, ScriptAgent([Action(text=attack)]), task)
    assert t.status is Status.OK and t.reward == harmless.reward == 0.0
    assert not (tmp_path / "ran").exists()
