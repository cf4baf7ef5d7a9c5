"""A hand-made run directory, for what the built-in environments never produce."""

from __future__ import annotations

import time
from pathlib import Path

from envlab.core import AgentSpec, Status, StepRecord, Trajectory
from envlab.runs import TRAJECTORIES_FILE, RunInfo, TrajectoryStore, write_run_info

AGENT = AgentSpec(name="shell-agent", model_id="test-model", harness="tests:shell")


def write_run(out: Path, trajectories: list[Trajectory]) -> Path:
    out.mkdir(parents=True)
    info = RunInfo(
        command=["envlab", "eval", "shellenv", "--agent", "shell-agent"],
        envlab_version="test",
        env_id="shellenv",
        env_hash="feedfacefeedface",
        agent=AGENT,
        seed=0,
        samples=1,
        n_tasks=len({t.task_id for t in trajectories}),
        task_set_hash="0",
        task_ids=sorted({t.task_id for t in trajectories}),
        concurrency=1,
        episode_config={},
        created_at=time.time(),
    )
    write_run_info(out, info)
    with TrajectoryStore(out / TRAJECTORIES_FILE) as store:
        for t in trajectories:
            store.append(t)
    return out


JSON_OUTPUT = '{"stdout": "a.txt\\nb.txt\\n", "stderr": "", "exit_code": 0}'


def shell_episode(
    task: str, *, reward: float | None = 1.0, note: str = "", output: str = JSON_OUTPUT
) -> Trajectory:
    """An episode of a sandboxed shell agent: a command, its output, a final answer."""
    call = {"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls -la /work"}'}}  # fmt: skip
    messages = [
        {"role": "system", "content": "You are in a sandbox. " * 10},
        {"role": "user", "content": f"List the files of /work. {note}"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "bash", "content": output},
        {"role": "assistant", "content": "The files are a.txt and b.txt."},
    ]  # fmt: skip
    steps = [
        StepRecord(index=0, message_index=2, info={"sandbox": {"cwd": "/work", "commands": 1}}),
        StepRecord(index=1, message_index=4, reward=0.0),
    ]
    return Trajectory(
        episode_id=f"{task}-0", task_id=task, group_id=task, sample_index=0, reward=reward,
        status=Status.OK if reward is not None else Status.INFRA_ERROR, env_id="shellenv",
        env_hash="feedfacefeedface", seed=1, agent=AGENT,
        components={"files_listed": 1.0, "safety": 1.0}, messages=messages, steps=steps,
        n_steps=2,
    )  # fmt: skip
