"""Long message contents (a task's instruction) are stored once per run, not in every line."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.core import StoreError, Trajectory
from envlab.runs import TrajectoryStore
from tests.runs.test_store import traj as store_traj

BIG = "Read this carefully.\n" + "the quick brown fox, é and 漢字 " * 100_000  # ~3.6 MB


def traj(i: int, messages: list[dict[str, object]]) -> Trajectory:
    return store_traj(i, task_id="t", sample_index=i, reward=0.0, messages=messages)


def episode(i: int) -> list[dict[str, object]]:
    return [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": BIG},
        {"role": "assistant", "content": f"answer {i}", "tool_calls": [{"arguments": "{}"}]},
        {"role": "user", "content": [{"type": "text", "text": BIG}]},  # content parts too
    ]


def test_a_huge_prompt_is_stored_once_and_loaded_back_exactly(tmp_path: Path) -> None:
    p = tmp_path / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        for i in range(10):
            store.append(traj(i, episode(i)))
    assert p.stat().st_size < 20_000, "lines hold references, not 10 copies of the prompt"
    blobs = list((tmp_path / "blobs").iterdir())
    assert len(blobs) == 1 and blobs[0].stat().st_size == len(BIG.encode())
    loaded = sorted(TrajectoryStore(p).load(), key=lambda t: t.sample_index)
    assert [t.messages for t in loaded] == [episode(i) for i in range(10)]
    assert loaded[0].messages[1]["content"] is loaded[9].messages[1]["content"], "one copy"


def test_short_contents_stay_in_the_line(tmp_path: Path) -> None:
    p = tmp_path / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        store.append(traj(0, [{"role": "user", "content": "x" * 100}]))
    assert not (tmp_path / "blobs").exists()
    assert b"x" * 100 in p.read_bytes()


def test_text_that_looks_like_a_reference_is_kept_as_written(tmp_path: Path) -> None:
    # an agent that writes the reference marker itself must not make the store substitute
    # another stored content for its message (nor fail to load)
    p = tmp_path / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        store.append(traj(0, episode(0)))
        digest = next((tmp_path / "blobs").iterdir()).name
        forged = "\x00envlab-blob:sha256:" + digest
        odd = "a NUL \x00 and \\u0000envlab-blob:sha256: in plain text"
        store.append(traj(1, [{"role": "assistant", "content": forged}, {"x": odd}]))
    got = {t.episode_id: t for t in TrajectoryStore(p).load()}
    assert got["e1"].messages == [{"role": "assistant", "content": forged}, {"x": odd}]


def test_a_missing_or_altered_blob_is_a_clear_error(tmp_path: Path) -> None:
    p = tmp_path / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        store.append(traj(0, episode(0)))
    blob = next((tmp_path / "blobs").iterdir())
    blob.write_text("something else")
    with pytest.raises(StoreError, match=r"trajectories\.jsonl:1: .* does not hold what was"):
        TrajectoryStore(p).load()
    blob.unlink()
    with pytest.raises(StoreError, match=r"trajectories\.jsonl:1: .*blobs/.* which is missing"):
        TrajectoryStore(p).load()


def test_blobs_are_written_before_the_line_and_left_whole(tmp_path: Path) -> None:
    p = tmp_path / "trajectories.jsonl"
    with TrajectoryStore(p) as store:
        store.append(traj(0, episode(0)))
        # a second store (a resumed run) finds the blob already there and writes no other
    with TrajectoryStore(p) as store:
        store.append(traj(1, episode(1)))
    stale = tmp_path / "blobs" / ".0123.99999.tmp"  # a writer killed mid-blob
    stale.write_bytes(b"half")
    with TrajectoryStore(p):
        pass
    names = sorted(x.name for x in (tmp_path / "blobs").iterdir())
    assert len(names) == 1 and not names[0].startswith("."), "no temporary file left"
    assert len(TrajectoryStore(p).load()) == 2


async def test_a_run_with_a_huge_instruction_reads_back_through_measure(tmp_path: Path) -> None:
    from envlab.agents.scripted import NoopAgent
    from envlab.core import AgentClass, Task, TaskSet
    from envlab.measure import load_run
    from envlab.rollout import rollout
    from tests.support.envs import EchoEnv

    class HugePrompt(EchoEnv):
        def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
            return TaskSet([Task(id=f"big-{i}", prompt=BIG, answer="ok") for i in range(5)])

    env = HugePrompt()
    await rollout(env, AgentClass(NoopAgent), env.tasks(), out_dir=tmp_path, samples=2)
    assert (tmp_path / "trajectories.jsonl").stat().st_size < 100_000
    assert len(list((tmp_path / "blobs").iterdir())) == 1
    run = load_run(tmp_path, trajectories=True)
    assert run.trajectories is not None and len(run.trajectories) == 10
    for t in run.trajectories:
        assert any(m.get("content") == BIG for m in t.messages)
