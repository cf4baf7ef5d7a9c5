"""Re-grades are judged as the engine judges the first grade: a task that declares its own
reward range (a two-player game's [-1, 1], a verifiers rubric's weights) is not flaky because
its raw re-grade differs from the normalised first grade."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envlab.core import Action, Component, EnvSpec, Reward, Rubric, Task, TaskSet, ToolEnv
from envlab.vet.runner import VetConfig, vet_environment


class RangedEpisode(ToolEnv):
    rubric = Rubric([Component("won", lambda ctx: 1.0)])

    async def score(self) -> Reward:  # the source's own scale: 0 lost, 1 draw, 2 won
        won = 2.0 if self.final_answer == str(self.task.answer if self.task else "") else 0.0
        return Reward(total=won, components={"won": won})

    def oracle_actions(self, task: Task) -> list[Action]:
        return [Action(text=str(task.answer))]


class RangedEnv(EnvSpec):
    id = "ranged"
    environment = RangedEpisode

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        tasks = [
            Task(id=f"r-{i}", prompt=f"Say the word number {i} of the secret list.",
                 answer=f"w{i * 37 % 11}x", metadata={"reward_range": [0.0, 2.0]}, split=split)
            for i in range(n or 4)
        ]  # fmt: skip
        return TaskSet(tasks, seed=seed, name=self.id)


async def test_a_declared_range_is_not_a_flaky_grader(tmp_path: Path) -> None:
    cfg = VetConfig(oracle_runs=2, samples=2, group_size=2, concurrency=2, tasks=4)
    report = await vet_environment(RangedEnv(), out_dir=tmp_path, config=cfg)
    checks: dict[str, Any] = {c.name: c for t in report.tasks for c in t.checks}
    assert checks["regrade"].status == "pass", checks["regrade"].evidence
    assert checks["regrade"].evidence["regrades"] == [1.0, 1.0]
