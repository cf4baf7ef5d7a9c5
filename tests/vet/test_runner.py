"""``vet_environment`` runs every episode through the one episode driver
(``envlab.rollout.run_episodes``): counted by the driver's own watch hook."""

from __future__ import annotations

import json
from pathlib import Path

from envlab.core import Trajectory
from envlab.envs import load_env
from envlab.rollout import PlannedEpisode, watch
from envlab.vet.runner import VetConfig, vet_environment

GALLERY = Path(__file__).resolve().parents[1] / "fixtures" / "vet"


class _Progress:
    def __init__(self) -> None:
        self.totals: list[int] = []
        self.done: list[tuple[str, str]] = []

    def planned(self, n: int) -> None:
        self.totals.append(n)

    def finished(self, episode: PlannedEpisode, trajectory: Trajectory) -> None:
        assert trajectory.info["probe"] == episode.info["probe"]
        self.done.append((episode.task.id, episode.info["probe"]))


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_every_episode_of_a_python_env_goes_through_the_one_driver(tmp_path: Path) -> None:
    seen: list[Trajectory] = []
    progress = _Progress()
    with watch(seen.append):
        report = await vet_environment(
            load_env("tests.fixtures.vet_envs:AlwaysYesEnv", n=4),
            out_dir=tmp_path,
            config=VetConfig(oracle_runs=2),
            observer=progress,
        )
    assert report.episodes > 0 and len(seen) == report.episodes
    assert sum(progress.totals) == len(progress.done) == report.episodes
    stored = _lines(tmp_path / "trajectories.jsonl")
    assert sorted(t["episode_id"] for t in stored) == sorted(t.episode_id for t in seen)
    assert len({t.episode_id for t in seen}) == len(seen), "every episode has its own id"
    probes = {t.info["probe"] for t in seen}
    assert {"noop", "oracle", "echo_prompt", "constant_yes"} <= probes
    assert {t.env_id for t in seen} == {report.env_id} == {"always-yes"}
    # the oracle's samples of one task are one group; different probes are different groups
    oracle = [t for t in seen if t.info["probe"] == "oracle" and t.task_id == "yes-0"]
    assert len(oracle) == 2 and len({t.group_id for t in oracle}) == 1
    assert {t.sample_index for t in oracle} == {0, 1}
    noop = next(t for t in seen if t.info["probe"] == "noop" and t.task_id == "yes-0")
    assert noop.group_id != oracle[0].group_id
    # the first oracle run is graded again on its final state (the regrade check's evidence)
    first = next(t for t in oracle if t.sample_index == 0)
    assert first.info["after_grade"]["regrades"] == [1.0, 1.0]
    assert "workspace_snapshot" not in first.info["after_grade"]  # no files to copy
    assert all("after_reset" in t.info for t in seen)


async def test_a_task_folder_is_vetted_through_the_one_driver(tmp_path: Path) -> None:
    """Both phases (the second built from the oracle's workspace, copied by the after-grade
    hook) run in the driver; the oracle's workspace is kept for the leak scan."""
    seen: list[Trajectory] = []
    progress = _Progress()
    with watch(seen.append):
        report = await vet_environment(
            load_env(str(GALLERY / "clean-sort")),
            out_dir=tmp_path,
            config=VetConfig(oracle_runs=2, concurrency=4),
            observer=progress,
        )
    assert report.episodes > 0 and len(seen) == report.episodes
    assert len(progress.totals) == 2, "two phases"
    assert sum(progress.totals) == len(progress.done) == report.episodes
    assert report.tasks[0].verdict == "ok", report.tasks[0].reasons
    probes = {t.info["probe"] for t in seen}
    assert {"noop", "oracle", "conftest", "break_fifo"} <= probes  # break_fifo: second phase
    first = next(t for t in seen if t.info["probe"] == "oracle" and t.sample_index == 0)
    snapshot = Path(first.info["after_grade"]["workspace_snapshot"])
    assert snapshot.is_dir() and any(snapshot.iterdir())
    assert first.info["after_grade"]["regrades"] == [1.0, 1.0]
    assert len(_lines(tmp_path / "trajectories.jsonl")) == report.episodes
