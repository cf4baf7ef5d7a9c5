"""Verdict precedence, the trainability rules (dead groups) and the stable JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envlab.core import AgentSpec, Status, Task, Trajectory
from envlab.vet.checks import TaskEvidence, result
from envlab.vet.model import EnvVet
from envlab.vet.python_checks import trainability
from envlab.vet.verdict import quality_score, task_verdict

ROOT = Path(__file__).resolve().parents[2]


def test_most_severe_failure_wins() -> None:
    checks = [
        result("noop", "fail", "noop scores"),
        result("answer_leak", "fail", "leak"),
        result("oracle", "pass", "fine"),
        result("trainability", "warn", "weak agent"),
    ]
    v = task_verdict("t", checks)
    assert v.verdict == "quarantine"
    assert v.reasons == ["answer_leak: leak", "noop: noop scores"]
    assert task_verdict("t", [result("oracle", "pass", "ok")]).verdict == "ok"
    assert task_verdict("t", [result("trainability", "fail", "dead")]).verdict == "dead"
    assert quality_score([v, task_verdict("u", checks[2:])]) == 50.0


def _traj(task: str, i: int, reward: float) -> Trajectory:
    return Trajectory(
        episode_id=f"{task}-{i}", task_id=task, group_id=task, sample_index=i, reward=reward,
        status=Status.OK, env_id="e", env_hash="h", seed=i, agent=AgentSpec(name="a"),
    )  # fmt: skip


def _evidence(groups: dict[str, list[float]]) -> tuple[list[Task], dict[str, TaskEvidence]]:
    tasks = [Task(id=k, prompt=k) for k in groups]
    ev = {
        k: TaskEvidence(Task(id=k, prompt=k), "python",
                        by_probe={"agent": [_traj(k, i, r) for i, r in enumerate(v)]})
        for k, v in groups.items()
    }  # fmt: skip
    return tasks, ev


def test_dead_groups_fail_when_the_agent_learns_elsewhere() -> None:
    tasks, ev = _evidence({"easy": [1, 1, 1, 1], "mixed": [1, 0, 0, 1], "hard": [0, 0, 0, 0]})
    tr = trainability(tasks, ev, True, group_size=8)
    assert tr.per_task["easy"].status == "fail" and tr.per_task["easy"].verdict == "dead"
    assert tr.per_task["easy"].evidence["band"] == "too easy"
    assert tr.per_task["hard"].status == "fail"
    assert tr.per_task["mixed"].status == "pass"
    # P(all 8 equal) with p = 0.5: 2 * 0.5^8
    assert tr.per_task["mixed"].evidence["p_dead_at_G"] == pytest.approx(2 * 0.5**8, abs=1e-4)
    assert tr.env_check.evidence["dead_groups"] == 2


def test_an_agent_that_solves_nothing_cannot_judge_trainability() -> None:
    tasks, ev = _evidence({"a": [0, 0], "b": [0, 0]})
    tr = trainability(tasks, ev, True, group_size=8)
    assert {c.status for c in tr.per_task.values()} == {"warn"}
    assert tr.env_check.status == "warn" and "too weak" in tr.env_check.summary


def test_schema_file_matches_the_model() -> None:
    committed = json.loads((ROOT / "docs" / "vet-schema.json").read_text())
    assert committed == EnvVet.model_json_schema(), (
        "docs/vet-schema.json is stale: regenerate it with "
        "`python -m envlab.vet.schema > docs/vet-schema.json` and bump SCHEMA_VERSION if a "
        "field changed meaning"
    )
