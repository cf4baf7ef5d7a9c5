"""A run directory read back: its info, its episodes as a stream, and what is wrong with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import NotFoundError, StoreError
from envlab.runs import TRAJECTORIES_FILE, RunDir, TrajectoryStore, write_run_info
from tests.runs.test_info import info
from tests.runs.test_store import traj


def test_a_run_read_back(tmp_path: Path) -> None:
    write_run_info(tmp_path, info())
    with TrajectoryStore(tmp_path / TRAJECTORIES_FILE) as store:
        for i in range(3):
            store.append(traj(i))
    run = RunDir(tmp_path)
    assert run.info.env_id == "arith" and run.name == tmp_path.name
    assert [r.episode_id for r in run.records()] == ["e0", "e1", "e2"]
    assert [t.episode_id for t in run.trajectories()] == ["e0", "e1", "e2"]
    assert run.notes == []


def test_a_torn_last_line_is_a_note(tmp_path: Path) -> None:
    write_run_info(tmp_path, info())
    with TrajectoryStore(tmp_path / TRAJECTORIES_FILE) as store:
        store.append(traj(0))
    with (tmp_path / TRAJECTORIES_FILE).open("ab") as f:
        f.write(traj(1).to_json()[:50])
    run = RunDir(tmp_path)
    assert len(run.records()) == 1
    assert run.notes == [f"{tmp_path}: ignored a torn last line of {TRAJECTORIES_FILE}"]


def test_what_is_not_a_run_is_refused_with_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match=r"no run directory at .*envlab eval --out DIR"):
        RunDir(tmp_path / "missing")
    with pytest.raises(StoreError, match=r"not a run directory: it has no run\.json"):
        RunDir(tmp_path)
    write_run_info(tmp_path, info())
    with pytest.raises(StoreError, match=r"holds no episodes yet .*--resume"):
        RunDir(tmp_path).records()
