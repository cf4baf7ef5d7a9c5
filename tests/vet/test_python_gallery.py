"""``envlab vet`` on Python tool environments written as a user would (``python_gallery``):
every task of a clean environment is ``ok``; every planted flaw gets its verdict, with evidence
that says where and what."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import Component, ConfigError, EnvSpec, Rubric
from envlab.runs import TrajectoryStore
from envlab.vet.model import EnvVet
from envlab.vet.runner import VetConfig, vet_environment
from tests.vet.python_gallery import clean, flawed, leaks


async def vet(spec: EnvSpec, tmp_path: Path) -> EnvVet:
    return await vet_environment(spec, out_dir=tmp_path / "vet", config=VetConfig(oracle_runs=2))


def failing(report: EnvVet, check: str) -> dict[str, str]:
    return {t.task_id: c.summary for t in report.tasks for c in t.checks
            if c.name == check and c.status == "fail"}  # fmt: skip


@pytest.mark.parametrize(
    "spec",
    [clean.LegsEnv(), clean.RoutingEnv(), clean.StockEnv(), clean.CountryEnv(), clean.GuessEnv()],
    ids=lambda s: s.name,
)
async def test_every_task_of_a_clean_environment_is_ok(spec: EnvSpec, tmp_path: Path) -> None:
    report = await vet(spec, tmp_path)
    bad = {t.task_id: t.reasons for t in report.tasks if t.verdict != "ok"}
    assert not bad, bad
    assert len(report.tasks) == 10


FLAWS = [  # spec, check, verdict, words the evidence must hold
    (leaks.SchemaLeakEnv(where="default"), "answer_leak", "quarantine",
     ["tool check_spelling: parameter word", "default"]),
    (leaks.SchemaLeakEnv(where="enum"), "answer_leak", "quarantine",
     ["tool check_spelling: parameter word", "enum"]),
    (leaks.SchemaLeakEnv(where="description"), "answer_leak", "quarantine",
     ["tool check_spelling: description", "labelled"]),
    (leaks.SystemLeakEnv(), "answer_leak", "quarantine", ["system prompt"]),
    (leaks.ToolResultLeakEnv(), "answer_leak", "quarantine", ["result of save_note", "expected"]),
    (flawed.ToolUseEnv(), "paid_by_actions", "quarantine", ["actions_", "multiply("]),
    (flawed.StatusFieldEnv(), "paid_by_actions", "quarantine",
     ["write:set_status.status=closed", "set_status("]),
    (flawed.AnyNumberEnv(), "trivial_strategies", "trivial", ["format_"]),
    (flawed.CandidateListEnv(), "trivial_strategies", "trivial", ["candidates_seen"]),
    (flawed.DuplicateTasksEnv(), "impossible_task", "broken", ["identical to", "Sydney"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "check", "verdict", "words"), FLAWS, ids=lambda x: getattr(x, "name", None)
)
async def test_every_planted_flaw_gets_its_verdict(
    spec: EnvSpec, check: str, verdict: str, words: list[str], tmp_path: Path
) -> None:
    report = await vet(spec, tmp_path)
    found = failing(report, check)
    assert found, [t.reasons for t in report.tasks]
    verdicts = {t.task_id: t.verdict for t in report.tasks}
    assert {verdicts[t] for t in found} == {verdict}
    assert any(all(w in summary for w in words) for summary in found.values()), found
    assert not report.clean if verdict == "quarantine" else True


async def test_a_leak_is_confirmed_by_a_copy_that_passes(tmp_path: Path) -> None:
    report = await vet(leaks.ToolResultLeakEnv(), tmp_path)
    check = next(c for c in report.tasks[0].checks if c.name == "answer_leak")
    assert check.evidence["copy"][0]["passed"]
    hit = check.evidence["hits"][0]
    assert hit["surface"] == "tool_result" and hit["how"] == "labelled"


async def test_only_the_conflicting_duplicates_are_broken(tmp_path: Path) -> None:
    report = await vet(flawed.DuplicateTasksEnv(), tmp_path)
    assert set(failing(report, "impossible_task")) == {"quiz-0", "quiz-1", "quiz-6", "quiz-7"}


async def test_the_spam_probe_calls_tools_before_its_one_answer(tmp_path: Path) -> None:
    """Where one message ends the episode, the spam agent spends its budget on tool calls."""
    await vet(clean.StockEnv(), tmp_path)
    store = TrajectoryStore(tmp_path / "vet" / "trajectories.jsonl")
    spam = [t for t in store.load() if t.info.get("probe") == "spam"]
    assert spam
    for t in spam:
        calls = [m for m in t.messages if m.get("role") == "assistant" and m.get("tool_calls")]
        texts = [m for m in t.messages if m.get("role") == "assistant" and not m.get("tool_calls")]
        assert calls and len(texts) == 1


def test_a_gate_that_can_never_fire_is_refused_when_written() -> None:
    with pytest.raises(ConfigError, match=r"gate 'one_line' has threshold 0\.0.*never fires"):
        flawed.gate_that_never_fires()
    with pytest.raises(ConfigError, match="always"):
        Component("g", lambda c: 1.0, gate=True, threshold=1.5)
    with pytest.raises(ConfigError, match="not a gate"):
        Component("c", lambda c: 1.0, threshold=0.5)
    with pytest.raises(ConfigError, match="negative weight"):
        Component("c", lambda c: 1.0, weight=-1)
    with pytest.raises(ConfigError, match="finite"):
        Component("c", lambda c: 1.0, weight=float("nan"))
    with pytest.raises(ConfigError, match=r"no total can reach 1"):
        Rubric([Component("a", lambda c: 1.0, weight=0.0), Component("b", lambda c: 1.0, weight=0)])
    Rubric([Component("g", lambda c: 1.0, gate=True, threshold=0.5), Component("a", lambda c: 1.0)])
