"""``run.json``: written whole or not at all, read back with errors that say what to do."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envlab.core import AgentSpec, StoreError
from envlab.runs import RUN_FILE, RunInfo, load_run_info, write_run_info


def info(**fields: object) -> RunInfo:
    base: dict[str, object] = dict(
        command=["envlab", "eval", "arith"], envlab_version="test", env_id="arith",
        env_hash="h", agent=AgentSpec(name="oracle"), seed=0, samples=1, n_tasks=1,
        task_set_hash="t", task_ids=["a"], concurrency=1, episode_config={},
        created_at=time.time(),
    )  # fmt: skip
    return RunInfo.model_validate({**base, **fields})


def test_roundtrip_and_replace(tmp_path: Path) -> None:
    write_run_info(tmp_path, info(seed=1))
    write_run_info(tmp_path, info(seed=2))
    assert load_run_info(tmp_path).seed == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [RUN_FILE]  # no temporary file left


def test_a_missing_or_corrupt_run_json_says_so(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"not a run directory: it has no run\.json"):
        load_run_info(tmp_path)
    (tmp_path / RUN_FILE).write_text('{"command": ')
    with pytest.raises(StoreError, match=r"run\.json is corrupt .* Restore it"):
        load_run_info(tmp_path)


def test_a_run_json_that_cannot_be_written_leaves_the_old_one(tmp_path: Path) -> None:
    write_run_info(tmp_path, info(seed=1))
    (tmp_path / f".{RUN_FILE}.tmp").mkdir()  # the temporary file cannot be created
    with pytest.raises(StoreError, match=r"cannot write .*run\.json"):
        write_run_info(tmp_path, info(seed=2))
    assert load_run_info(tmp_path).seed == 1


def test_identity_is_what_a_resume_must_match() -> None:
    a, b = info(), info(concurrency=8, command=["other"])
    assert a.identity() == b.identity()
    assert info(seed=1).identity() != a.identity()
