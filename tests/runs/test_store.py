from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from envlab.core import AgentSpec, Status, StoreError, Trajectory
from envlab.runs import TrajectoryStore


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


def test_an_episode_recorded_twice_reads_as_its_last_record(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    with TrajectoryStore(p) as s:
        s.append(traj(0, status=Status.INFRA_ERROR, reward=None))
        s.append(traj(1))
        s.append(traj(0, reward=0.5))  # the infra error, run again by --resume
    got = {t.episode_id: t for t in TrajectoryStore(p).iter()}
    assert sorted(got) == ["e0", "e1"] and got["e0"].reward == 0.5
    assert len(TrajectoryStore(p).load(every_record=True)) == 3
    assert [r.reward for r in TrajectoryStore(p).records()] == [1.0, 0.5]


def test_a_torn_rerun_never_hides_the_record_before_it(tmp_path: Path) -> None:
    # attack: --resume reruns e0 and is killed while writing it; the torn line names e0 in its
    # first bytes, and must not count as e0's last record (e0 would vanish from the run)
    p = tmp_path / "t.jsonl"
    with TrajectoryStore(p) as s:
        s.append(traj(0, status=Status.INFRA_ERROR, reward=None))
        s.append(traj(1))
    line = traj(0, reward=1.0).to_json()
    with p.open("ab") as f:
        f.write(line[: len(line) // 2])
    got = {t.episode_id: t for t in TrajectoryStore(p).iter()}
    assert sorted(got) == ["e0", "e1"] and got["e0"].status == Status.INFRA_ERROR


def test_reading_sees_only_what_was_written_when_it_started(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    write(p, 2)
    reading = TrajectoryStore(p).iter()
    with TrajectoryStore(p) as s:  # a writer appends while a reader streams
        s.append(traj(2))
    assert [t.episode_id for t in reading] == ["e0", "e1"]


def test_a_stream_holds_one_trajectory_at_a_time(tmp_path: Path) -> None:
    import tracemalloc

    p = tmp_path / "t.jsonl"
    text = "a long answer " * 2000  # ~28 KB a line, kept inline
    with TrajectoryStore(p, blob_min_chars=10**9) as s:
        for i in range(150):
            s.append(traj(i, messages=[{"role": "assistant", "content": f"{i} {text}"}]))
    line = p.stat().st_size // 150

    def peak(read: Any) -> int:
        tracemalloc.start()
        try:
            read()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    streamed = peak(lambda: sum(len(t.messages) for t in TrajectoryStore(p).iter()))
    loaded = peak(lambda: len(TrajectoryStore(p).load()))
    assert streamed < 20 * line < loaded


def test_records_need_no_blobs(tmp_path: Path) -> None:
    p = tmp_path / "t.jsonl"
    with TrajectoryStore(p, blob_min_chars=100) as s:
        s.append(traj(0, messages=[{"role": "user", "content": "x" * 500}]))
    for blob in (tmp_path / "blobs").iterdir():
        blob.unlink()
    assert [r.episode_id for r in TrajectoryStore(p).records()] == ["e0"]
    with pytest.raises(StoreError, match="which is missing"):
        TrajectoryStore(p).load()
