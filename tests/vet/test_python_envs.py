"""``envlab vet`` on Python environments: the right verdict from the right check."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import StoreError
from envlab.envs import load_env
from envlab.runs import TrajectoryStore
from envlab.vet.model import EnvVet
from envlab.vet.runner import VetConfig, vet_environment


async def vet(name: str, tmp_path: Path, tasks: int | None = None) -> EnvVet:
    cfg = VetConfig(oracle_runs=3, tasks=tasks)
    return await vet_environment(load_env(name), out_dir=tmp_path / "vet", config=cfg)


def failing(report: EnvVet, check: str) -> set[str]:
    return {
        t.task_id for t in report.tasks for c in t.checks if c.name == check and c.status == "fail"
    }


@pytest.mark.parametrize("name", ["arith", "calc"])
async def test_builtin_envs_are_ok(name: str, tmp_path: Path) -> None:
    report = await vet(name, tmp_path, tasks=60)
    assert report.verdict_counts["ok"] == 60, [t.reasons for t in report.tasks if t.reasons][:3]
    assert report.clean and report.quality_score == 100.0
    assert (tmp_path / "vet" / "vet.json").is_file()
    assert (tmp_path / "vet" / "trajectories.jsonl").is_file()


async def test_constant_answer_beating_chance_is_trivial(tmp_path: Path) -> None:
    report = await vet("tests.fixtures.vet_envs:AlwaysYesEnv", tmp_path)
    assert {t.verdict for t in report.tasks} == {"trivial"}
    assert failing(report, "trivial_strategies") == {t.task_id for t in report.tasks}
    env_check = next(c for c in report.env_checks if c.name == "trivial_strategies")
    assert env_check.status == "fail" and "constant_yes" in env_check.evidence["beating_chance"]


async def test_answer_in_prompt_is_quarantined(tmp_path: Path) -> None:
    report = await vet("tests.fixtures.vet_envs:LeakyPromptEnv", tmp_path)
    assert {t.verdict for t in report.tasks} == {"quarantine"}
    assert failing(report, "answer_leak") == {t.task_id for t in report.tasks}
    assert not report.clean


async def test_state_carried_across_resets_is_broken(tmp_path: Path) -> None:
    report = await vet("tests.fixtures.vet_envs:StickyResetEnv", tmp_path)
    assert {t.verdict for t in report.tasks} == {"broken"}
    assert failing(report, "reset_hygiene") == {t.task_id for t in report.tasks}
    check = next(c for c in report.tasks[0].checks if c.name == "reset_hygiene")
    assert check.evidence["differing_keys"] == ["episodes_seen"]


async def test_partial_credit_for_echoing_the_prompt_is_trivial(tmp_path: Path) -> None:
    """The calc finding: echoing the prompt earned 0.8 on a tenth of the tasks and never passed;
    the check judges the credit against the no-op floor, not only full passes."""
    report = await vet("tests.fixtures.vet_envs:EchoCreditEnv", tmp_path)
    env_check = next(c for c in report.env_checks if c.name == "trivial_strategies")
    assert env_check.status == "fail", env_check.summary
    partial = env_check.evidence["partial_credit"]
    assert set(partial) == {"echo_prompt"} and not env_check.evidence["beating_chance"]
    assert partial["echo_prompt"]["lower_bound"] > 0
    divisions = {t.task_id for t in report.tasks if int(t.task_id.split("-")[1]) % 10 == 0}
    assert set(partial["echo_prompt"]["earned_on"]) == divisions
    assert failing(report, "trivial_strategies") == divisions
    assert {t.verdict for t in report.tasks if t.task_id in divisions} == {"trivial"}
    assert {t.verdict for t in report.tasks if t.task_id not in divisions} == {"ok"}


async def test_a_second_vet_on_the_same_out_dir_is_refused_and_loses_nothing(
    tmp_path: Path,
) -> None:
    out = tmp_path / "vet"
    out.mkdir()
    holder = TrajectoryStore(out / "trajectories.jsonl")
    holder.open()  # another vet, still writing
    holder.path.write_bytes(b"")
    try:
        with pytest.raises(StoreError, match="another process"):
            await vet("arith", tmp_path)
        assert (out / "trajectories.jsonl").exists(), "the other writer's file is not deleted"
    finally:
        holder.close()


async def test_a_task_whose_best_play_cannot_pass_is_declared_not_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """triage draws each ticket's outcome: on task 1 the Bayes action (the best any policy can
    do) misses it and scores 0.25. The task declares that (``reference_reward``): the oracle
    check warns instead of calling the task broken; a declaration the oracle does not meet
    fails it, so a false one cannot hide a broken reference."""
    cfg = VetConfig(oracle_runs=2, samples=2, group_size=2, concurrency=2, tasks=2)
    rep = await vet_environment(load_env("triage"), out_dir=tmp_path / "a", config=cfg)
    [task1] = [t for t in rep.tasks if t.task_id.endswith("00001")]
    oracle = next(c for c in task1.checks if c.name == "oracle")
    assert oracle.status == "warn" and "declared 0.25" in oracle.summary and task1.verdict == "ok"

    import envlab.envs.triage as triage

    real = triage.realized_reward
    monkeypatch.setattr(triage, "realized_reward", lambda task, option: real(task, option) / 2)
    rep = await vet_environment(load_env("triage"), out_dir=tmp_path / "b", config=cfg)
    [task1] = [t for t in rep.tasks if t.task_id.endswith("00001")]
    oracle = next(c for c in task1.checks if c.name == "oracle")
    assert oracle.status == "fail" and task1.verdict == "broken"
