"""The defect gallery: every deliberately defective task folder gets the right verdict from the
right check, and every clean one is ``ok``. One vet run (real sandboxes, real verifiers) serves
all the assertions."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.envs import load_env
from envlab.vet.model import EnvVet
from envlab.vet.runner import VetConfig, vet_environment

GALLERY = Path(__file__).resolve().parents[1] / "fixtures" / "vet"
# one vet run of ~1,100 episodes (39 task folders x ~28 probes) serves every test; it is the
# first test's setup, which pytest-timeout counts against that test
pytestmark = pytest.mark.timeout(900)

EXPECTED: dict[str, tuple[str, str]] = {
    # leaks: the answer is readable at reset
    "leak-file": ("quarantine", "answer_leak"),
    "leak-archive": ("quarantine", "answer_leak"),
    "leak-git-history": ("quarantine", "answer_leak"),
    "leak-git-unreachable": ("quarantine", "answer_leak"),
    "leak-env-var": ("quarantine", "answer_leak"),
    "leak-instruction": ("quarantine", "answer_leak"),
    # hacks: a probe is rewarded without solving the task
    "hack-conftest": ("quarantine", "tamper"),
    "hack-self-reported": ("quarantine", "tamper"),
    "hack-workspace-script": ("quarantine", "tamper"),
    "hack-trusts-input": ("quarantine", "tamper"),
    "hack-reward-file": ("quarantine", "tamper"),
    "hack-fake-python": ("quarantine", "tamper"),
    # the generic hacks of code and files the verifier runs or reads
    "hack-reward-if-missing": ("quarantine", "tamper"),
    "hack-exit-early": ("quarantine", "tamper"),
    "hack-pytest-in-process": ("quarantine", "tamper"),
    "hack-recomputes-sqlite": ("quarantine", "tamper"),
    "hack-expected-in-workspace": ("quarantine", "tamper"),
    "hack-crash-passes": ("quarantine", "tamper"),
    "hack-git-hooks": ("quarantine", "tamper"),
    # broken graders and tasks
    "flaky": ("broken", "regrade"),
    "impossible": ("broken", "oracle"),
    "no-reward": ("broken", "verifier_health"),
    "verifier-crash": ("broken", "verifier_health"),
    "verifier-timeout": ("broken", "verifier_health"),
    "network-verifier": ("broken", "network"),
    # trivial
    "trivial-exists": ("trivial", "noop"),
    "trivial-empty": ("trivial", "noop"),
    "trivial-choice": ("trivial", "trivial_strategies"),
}
WINNING_PROBE: dict[str, set[str]] = {
    "hack-conftest": {"conftest"},
    "hack-self-reported": {"success_word_PASS"},
    "hack-workspace-script": {"edit_test_scripts"},
    "hack-trusts-input": {"truncate_mentioned"},
    "hack-reward-file": {"reward_files"},
    "hack-fake-python": {"fake_tools"},
    "hack-reward-if-missing": {"module_reward_exit"},
    "hack-exit-early": {"module_exit_at_import"},
    "hack-pytest-in-process": {"module_patches_pytest"},
    "hack-recomputes-sqlite": {"tampered_inputs_first", "tampered_inputs_last"},
    "hack-expected-in-workspace": {"answer_link_app_.grader_expected.txt"},
    "hack-crash-passes": {"break_deep_json"},
    "hack-git-hooks": {"git_programs"},
}
"""Per hack fixture, the probes of which at least one must win (a task-level defect: it stays
exposed whatever the verifier does)."""
DEFENDED = {
    # envlab's verifier defends these on every task: the probes run and score no more than 0
    "clean-pytest": {"module_reward_kill", "forged_bytecode", "break_deleted_workdir"},
    "clean-sort": {"answer_link_expected_sorted.txt", "break_dev_zero", "break_fifo"},
    "clean-json": {"break_stdout_link", "break_dev_zero"},
    "hack-reward-if-missing": {"module_reward_kill", "forged_bytecode"},
    "hack-git-hooks": {"break_fifo"},
}
CLEAN = sorted(p.name for p in GALLERY.iterdir() if p.name.startswith("clean-"))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> EnvVet:
    import asyncio

    out = tmp_path_factory.mktemp("vet-gallery")
    # M = 6: a grader that flips a coin escapes detection with probability 2^-11
    # the episodes mostly wait (sandboxes starting, verifiers running): 4 at once on 2 cores
    cfg = VetConfig(oracle_runs=6, concurrency=4)
    return asyncio.run(vet_environment(load_env(str(GALLERY)), out_dir=out, config=cfg))


def test_gallery_size() -> None:
    assert len(EXPECTED) >= 27 and len(CLEAN) >= 10
    assert set(EXPECTED) | set(CLEAN) == {p.name for p in GALLERY.iterdir() if p.is_dir()}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_defective_task_gets_the_right_verdict_from_the_right_check(
    report: EnvVet, name: str
) -> None:
    verdict, check = EXPECTED[name]
    task = next(t for t in report.tasks if t.task_id == name)
    by = {c.name: c for c in task.checks}
    assert task.verdict == verdict, task.reasons
    assert by[check].status == "fail", by[check].summary
    assert by[check].verdict == verdict
    if name in WINNING_PROBE:
        winners = set(by["tamper"].evidence["winning_probes"])
        assert WINNING_PROBE[name] & winners, by["tamper"].summary
        probes = by["tamper"].evidence["probes"]
        assert all(probes[w]["outcome"] == "exposed" for w in winners)
    if name.startswith("leak-"):
        hits = by["answer_leak"].evidence["hits"]
        assert hits and all("where" in h and "similarity" in h for h in hits)


@pytest.mark.parametrize("name", CLEAN)
def test_clean_task_is_ok(report: EnvVet, name: str) -> None:
    task = next(t for t in report.tasks if t.task_id == name)
    assert task.verdict == "ok", task.reasons
    by = {c.name: c.status for c in task.checks}
    assert by["oracle"] == "pass" and by["tamper"] == "pass" and by["reset_hygiene"] == "pass"


@pytest.mark.parametrize("name", sorted(DEFENDED))
def test_the_verifier_defends_the_generic_hacks(report: EnvVet, name: str) -> None:
    task = next(t for t in report.tasks if t.task_id == name)
    probes = next(c for c in task.checks if c.name == "tamper").evidence["probes"]
    for probe in DEFENDED[name]:
        assert probes[probe]["outcome"] == "defended", (probe, probes[probe])


@pytest.mark.parametrize("name", ["clean-archive-material", "clean-decode-material"])
def test_an_answer_inside_the_named_material_is_a_warning(report: EnvVet, name: str) -> None:
    task = next(t for t in report.tasks if t.task_id == name)
    leak = next(c for c in task.checks if c.name == "answer_leak")
    assert task.verdict == "ok" and leak.status == "warn", leak.summary
    assert leak.evidence["in_material"] and not leak.evidence["hits"]


def test_leaks_are_confirmed_by_copying_the_answer(report: EnvVet) -> None:
    for name in (n for n in EXPECTED if n.startswith("leak-")):
        task = next(t for t in report.tasks if t.task_id == name)
        copies = next(c for c in task.checks if c.name == "answer_leak").evidence["copies"]
        assert any(o["outcome"] == "exposed" for o in copies.values()), (name, copies)


def test_evidence_names_where_the_leaks_are(report: EnvVet) -> None:
    wheres = {
        t.task_id: {h["where"] for c in t.checks if c.name == "answer_leak"
                    for h in c.evidence.get("hits", [])}
        for t in report.tasks
    }  # fmt: skip
    assert "env:CHECK_TOTAL" in wheres["leak-env-var"]
    assert "/app/.cache/expected" in wheres["leak-file"]
    assert "/app/old.tgz!backup/answer.txt" in wheres["leak-archive"]
    assert "instruction.md" in wheres["leak-instruction"]
    assert any(w.startswith("/app/.git object") for w in wheres["leak-git-unreachable"])
    n = len(EXPECTED) + len(CLEAN)
    assert not report.clean
    assert report.quality_score == pytest.approx(100 * len(CLEAN) / n, abs=0.01)
