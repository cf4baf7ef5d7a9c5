"""Checks that read the structured error of an episode (``EpisodeError``), not its text."""

from __future__ import annotations

from envlab.core import AgentSpec, EpisodeError, Status, Task, Trajectory
from envlab.vet.checks import TaskEvidence, check_oracle, check_verifier_health


def traj(reward: float | None, status: Status = Status.OK, error: EpisodeError | None = None,
         grader_failed: str | None = None) -> Trajectory:  # fmt: skip
    return Trajectory(
        episode_id="e", task_id="t", group_id="t", sample_index=0, reward=reward, status=status,
        env_id="e", env_hash="h", seed=0, agent=AgentSpec(name="a"), error=error,
        grader_failed=grader_failed,
    )  # fmt: skip


def evidence(**by_probe: list[Trajectory]) -> TaskEvidence:
    return TaskEvidence(Task(id="t", prompt="p"), "taskfolder", by_probe=by_probe)


def test_grading_machinery_that_failed_is_the_verifiers_health() -> None:
    broke = EpisodeError(kind="infra", phase="grade", message="InfraError: verifier: no space\nx")
    c = check_verifier_health(
        evidence(noop=[traj(0.0)], oracle=[traj(None, Status.INFRA_ERROR, broke)])
    )
    assert c.status == "fail" and c.verdict == "broken"
    assert c.summary.endswith("in 1/2 episodes: InfraError: verifier: no space")


def test_an_infra_error_outside_grading_is_not_the_graders() -> None:
    reset = EpisodeError(kind="infra", phase="reset", message="sandbox did not start")
    c = check_verifier_health(
        evidence(noop=[traj(0.0)], oracle=[traj(None, Status.INFRA_ERROR, reset)])
    )
    assert c.status == "pass", c.summary


def test_an_invalid_grade_is_the_verifiers_health() -> None:
    c = check_verifier_health(evidence(noop=[traj(0.0, grader_failed="no reward file")]))
    assert c.status == "fail" and "no reward file" in c.summary


def test_the_oracles_errors_are_shown_as_kind_phase_and_message() -> None:
    late = EpisodeError(kind="timeout", phase="act", message="the agent took longer than 60s")
    c = check_oracle(evidence(oracle=[traj(1.0), traj(0.0, Status.TIMEOUT, late)]))
    assert c.status == "fail" and c.evidence["errors"] == [
        "timeout in act: the agent took longer than 60s"
    ]


def test_a_task_whose_grading_needs_the_network_is_broken_and_names_what() -> None:
    from envlab.vet.checks import check_network

    why = "needs the network (https://example.com/data.csv): grading is offline (exit 1)"
    c = check_network(evidence(oracle=[traj(0.0, grader_failed=why)], noop=[traj(0.0)]))
    assert c.status == "fail" and c.verdict == "broken"
    assert "https://example.com/data.csv" in c.summary and "internet" in c.summary


def test_the_shared_verifier_mode_is_flagged_as_an_integrity_cost() -> None:
    ev = evidence(oracle=[traj(1.0)], noop=[traj(0.0)])
    ev.shared_verifier = True
    c = check_verifier_health(ev)
    assert c.status == "warn" and "processes alive" in c.summary
