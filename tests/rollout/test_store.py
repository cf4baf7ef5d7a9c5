from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from envlab.core import AgentSpec, Status, StoreError, Trajectory
from envlab.rollout import TrajectoryStore


def traj(i: int, **fields: Any) -> Trajectory:
    """Episode ``i`` of a test run; ``fields`` override the defaults (shared by the store tests)."""
    base: dict[str, Any] = dict(
        episode_id=f"e{i}", task_id=f"t{i}", group_id="g", sample_index=0, reward=1.0,
        status=Status.OK, env_id="e", env_hash="h", seed=i, agent=AgentSpec(name="a"),
    )  # fmt: skip
    return Trajectory(**{**base, **fields})


def write(path: Path, n: int) -> None:
    with TrajectoryStore(path) as s:
        for i in range(n):
            s.append(traj(i))


def test_roundtrip(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, 3)
    assert [t.episode_id for t in TrajectoryStore(p).load()] == ["e0", "e1", "e2"]
    assert len(p.read_text().splitlines()) == 3


def test_torn_last_line_dropped_with_warning(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "t.jsonl"
    write(p, 3)
    line = traj(3).to_json().decode()
    with p.open("a") as f:
        f.write(line[: len(line) // 2])  # a write cut short by a crash
    store = TrajectoryStore(p)
    with caplog.at_level(logging.WARNING):
        got = store.load(repair=True)
    assert [t.episode_id for t in got] == ["e0", "e1", "e2"]
    assert "torn last line" in caplog.text
    # repaired: appending now yields a valid file
    with store:
        store.append(traj(3))
    assert len(TrajectoryStore(p).load()) == 4


def test_corrupt_middle_line_is_an_error_naming_it(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, 3)
    lines = p.read_text().splitlines()
    lines[1] = lines[1][:40]
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(StoreError, match=r"t\.jsonl:2: corrupt trajectory line"):
        TrajectoryStore(p).load()


def test_a_last_record_missing_only_its_newline_is_kept_and_ended(tmp_path: Path) -> None:
    # attack: a crash after the write of a line but before its "\n" landed (or a file edited
    # by hand); the next record used to be glued to it, and both episodes were lost
    p = tmp_path / "t.jsonl"
    write(p, 3)
    p.write_bytes(p.read_bytes().removesuffix(b"\n"))
    reader = TrajectoryStore(p)
    assert [t.episode_id for t in reader.load()] == ["e0", "e1", "e2"]
    assert not p.read_bytes().endswith(b"\n"), "a plain read never changes the file"
    with TrajectoryStore(p) as store:  # opening to append ends the line first
        store.append(traj(3))
    assert p.read_bytes().count(b"\n") == 4
    assert [t.episode_id for t in TrajectoryStore(p).load()] == ["e0", "e1", "e2", "e3"]


def test_repair_ends_an_unterminated_last_record(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, 2)
    p.write_bytes(p.read_bytes().removesuffix(b"\n"))
    store = TrajectoryStore(p)
    assert len(store.load(repair=True)) == 2
    assert store.repaired_newline and store.dropped_torn_line is None
    store.close()
    assert p.read_bytes().endswith(b"}\n")


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    import os

    p = tmp_path / "t.jsonl"
    first = TrajectoryStore(p)
    first.open()
    try:
        second = TrajectoryStore(p)
        with pytest.raises(StoreError, match=rf"another process \(pid {os.getpid()}"):
            second.append(traj(0))
        with pytest.raises(StoreError, match="being written"):
            second.load(repair=True)  # repairing is writing
        assert [t.episode_id for t in second.load()] == []  # reading needs no lock
        first.append(traj(0))
    finally:
        first.close()
    with TrajectoryStore(p) as again:  # released on close
        again.append(traj(1))
    assert len(TrajectoryStore(p).load()) == 2
    assert (tmp_path / "lock").read_text().strip().isdigit()
