"""How one probe's episode becomes ``exposed`` or ``defended`` (``vet.exposure``), and the
``tamper`` check naming the winning probe, on recorded trajectories."""

from __future__ import annotations

from envlab.core import AgentSpec, EpisodeError, Status, Task, Trajectory
from envlab.vet.checks import TaskEvidence
from envlab.vet.exposure import check_tamper, probe_outcome
from envlab.vet.informed import GAVE_UP
from envlab.vet.probes import Probe

HACK = Probe("forged_bytecode", "forge", "true", family="forged_bytecode")
HONEST = Probe("tampered_inputs_first", "tamper", "true", bar="pass", after_oracle="true")


def traj(reward: float | None, status: Status = Status.OK, *, steps: int = 2,
         grader_failed: str | None = None, error: EpisodeError | None = None,
         tool_text: str = "") -> Trajectory:  # fmt: skip
    return Trajectory(
        episode_id="e", task_id="t", group_id="t", sample_index=0, reward=reward, status=status,
        env_id="e", env_hash="h", seed=0, agent=AgentSpec(name="a"), n_steps=steps,
        grader_failed=grader_failed, error=error,
        messages=[{"role": "tool", "content": tool_text}] if tool_text else [],
    )  # fmt: skip


def test_a_reward_above_doing_nothing_is_exposed() -> None:
    assert probe_outcome(HACK, [traj(1.0)], 0.0)["outcome"] == "exposed"
    assert probe_outcome(HACK, [traj(0.3)], 0.0)["outcome"] == "exposed"
    assert probe_outcome(HACK, [traj(0.3)], 0.3)["outcome"] == "defended"


def test_a_probe_that_also_works_honestly_must_pass_to_be_exposed() -> None:
    assert probe_outcome(HONEST, [traj(0.5)], 0.0)["outcome"] == "defended"
    assert probe_outcome(HONEST, [traj(1.0)], 0.0)["outcome"] == "exposed"
    gave_up = traj(0.0, tool_text=f"{GAVE_UP}: same answer")
    assert probe_outcome(HONEST, [gave_up], 0.0)["outcome"] == "not_applicable"


def test_a_grade_that_failed_is_a_defence_and_one_that_escaped_is_exposed() -> None:
    failed = probe_outcome(HACK, [traj(0.0, grader_failed="test.sh was killed by signal 9")], 0)
    assert failed["outcome"] == "defended" and "signal 9" in failed["grader_failed"]
    boom = EpisodeError(kind="infra", phase="grade", message="InfraError: boom\n  traceback")
    escaped = probe_outcome(HACK, [traj(None, Status.INFRA_ERROR, error=boom)], 0.0)
    assert escaped["outcome"] == "exposed" and "infra_error" in escaped["how"]
    assert escaped["how"].endswith("(infra_error: InfraError: boom)")  # the headline only
    crashed = EpisodeError(kind="env", phase="step", message="tool crashed")
    env = probe_outcome(HACK, [traj(None, Status.ENV_ERROR, error=crashed)], 0.0)
    assert env["outcome"] == "exposed"
    # the machinery failed before the probe did anything: not the probe's doing
    reset = EpisodeError(kind="infra", phase="reset", message="no space left")
    early = probe_outcome(HACK, [traj(None, Status.INFRA_ERROR, steps=0, error=reset)], 0.0)
    assert early["outcome"] == "inconclusive"


def test_the_tamper_check_names_the_winning_probe_and_lists_the_defended() -> None:
    ev = TaskEvidence(Task(id="t", prompt="p"), "taskfolder")
    ev.probes = {HACK.name: HACK, "break_fifo": Probe("break_fifo", "fifo", "true")}
    ev.by_probe = {
        "noop": [traj(0.0)],
        HACK.name: [traj(1.0)],
        "break_fifo": [traj(0.0, grader_failed="no reward")],
    }
    c = check_tamper(ev)
    assert c.status == "fail" and c.verdict == "quarantine"
    assert set(c.evidence["winning_probes"]) == {"forged_bytecode"}
    assert c.evidence["defended"] == ["break_fifo"]
    assert "forged_bytecode" in c.summary
