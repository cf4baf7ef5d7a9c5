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
WINNING_PROBE = {
    "hack-conftest": "conftest",
    "hack-self-reported": "success_word_PASS",
    "hack-workspace-script": "edit_test_scripts",
    "hack-trusts-input": "truncate_mentioned",
    "hack-reward-file": "reward_files",
    "hack-fake-python": "fake_tools",
}
CLEAN = sorted(p.name for p in GALLERY.iterdir() if p.name.startswith("clean-"))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> EnvVet:
    import asyncio

    out = tmp_path_factory.mktemp("vet-gallery")
    # M = 6: a grader that flips a coin escapes detection with probability 2^-11
    cfg = VetConfig(oracle_runs=6, concurrency=2, progress=False)
    return asyncio.run(
        vet_environment(load_env(str(GALLERY)), env_id="gallery", out_dir=out, config=cfg)
    )


def test_gallery_size() -> None:
    assert len(EXPECTED) >= 20 and len(CLEAN) >= 8
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
        assert WINNING_PROBE[name] in by["tamper"].evidence["winning_probes"]
    if name.startswith("leak-"):
        hits = by["answer_leak"].evidence["hits"]
        assert hits and all("where" in h and "similarity" in h for h in hits)


@pytest.mark.parametrize("name", CLEAN)
def test_clean_task_is_ok(report: EnvVet, name: str) -> None:
    task = next(t for t in report.tasks if t.task_id == name)
    assert task.verdict == "ok", task.reasons
    by = {c.name: c.status for c in task.checks}
    assert by["oracle"] == "pass" and by["tamper"] == "pass" and by["reset_hygiene"] == "pass"


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
    assert not report.clean and report.quality_score == pytest.approx(100 * len(CLEAN) / 30)
