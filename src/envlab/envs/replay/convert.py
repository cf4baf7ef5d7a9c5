"""Logs from an envlab run directory: every scored episode becomes one logged session.

The messages are rebuilt from the episode's parsed steps (what the agent did and what the
environment answered, the same whatever the agent's harness rendered), after the system
prompt and the opening user message of its transcript. Which tools write is not in a
trajectory: it comes from the environment named in ``run.json`` (its tools' ``writes``), or
from ``writes=`` when that environment cannot be loaded here. A run with ``--perturb``: the
calls a fault answered without running the tool (timeout, transient, rate limit) are left out
with their answers, the results a fault changed are logged as the agent saw them, and every
fault is in the session's ``metadata.faults``.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envlab.core import ConfigError, EnvSpec, Task, ToolCall, ToolResult, Trajectory
from envlab.envs.reopen import reopen_spec, tasks_by_id
from envlab.envs.replay.format import LogMessage, LogSession, Outcome
from envlab.runs import RunDir, RunInfo


@dataclass(slots=True)
class Converted:
    sessions: list[LogSession] = field(default_factory=list)
    writes: list[str] = field(default_factory=list)
    writes_from: str = ""
    """Where ``writes`` came from: ``the environment NAME`` or ``--writes``."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Episodes left out, by why (``env_error``, ``infra_error``, ``unscored``)."""


def _load_spec(info: RunInfo) -> tuple[EnvSpec | None, str]:
    also = [info.command[2]] if info.command[1:2] == ["eval"] and len(info.command) > 2 else []
    return reopen_spec(info.env_id, info.env_config, also)


def _writes_of(spec: EnvSpec) -> list[str]:
    env = spec.new_episode()
    return sorted(t.name for t in env.tools if t.writes)


def _find_task(spec: EnvSpec, info: RunInfo, task_id: str, cache: dict[str, Task]) -> Task | None:
    if not cache:
        cache.update(tasks_by_id(spec, info.seed))
    return cache.get(task_id)


def _head(traj: Trajectory) -> list[LogMessage]:
    """The transcript's system prompt and opening user message."""
    head: list[dict[str, Any]] = []
    system = next((m for m in traj.messages if m.get("role") == "system"), None)
    if system is not None:
        head.append({"role": "system", "content": system.get("content") or ""})
    opening = next((m for m in traj.messages if m.get("role") == "user"), None)
    if opening is not None:
        head.append({"role": "user", "content": opening.get("content") or ""})
    return [LogMessage.model_validate(m) for m in head]


def _messages(traj: Trajectory) -> list[LogMessage]:
    """System prompt and opening of the transcript, then each step: the action, the answer.
    A step's i-th result answers its i-th call (the agent's ids need not be unique: one used
    before in the session is made unique, ``ID#STEP.I``, on the call and its result)."""
    out = _head(traj)
    seen: set[str] = set()
    for n, step in enumerate(traj.steps):
        msg = step.action.to_message()
        results = step.observation.tool_results
        stopped = _stopped(step.info, step.action.tool_calls, results)
        calls: list[dict[str, Any]] = []
        answers: list[LogMessage] = []
        for i, c in enumerate(msg.get("tool_calls", [])):
            r = results[i] if i < len(results) else None
            cid = c["id"] or (r.tool_call_id if r is not None else "") or f"call_{n}_{i}"
            if cid in seen:
                cid = f"{cid}#{n}.{i}"
            seen.add(cid)
            if i in stopped:
                continue
            calls.append({**c, "id": cid})
            if r is not None:
                tool = {**r.to_message(), "tool_call_id": cid, "is_error": r.is_error or None}
                answers.append(LogMessage.model_validate(tool))
        if msg["content"] or calls or not msg.get("tool_calls"):
            msg = {**msg, "content": msg["content"] or None, "tool_calls": calls or None}
            out.append(LogMessage.model_validate(msg))
        out.extend(answers)
        if step.observation.text:
            out.append(LogMessage(role="user", content=step.observation.text))
    return out


STOPPING_FAULTS = frozenset({"timeout", "transient", "rate_limit"})
"""Perturbations that answer a call without running the tool (docs/robustness.md)."""


def _stopped(info: dict[str, Any], calls: list[ToolCall], results: list[ToolResult]) -> set[int]:
    """The positions of a step's calls a perturbation answered without running the tool: left
    out of the logs (the session is what the tools did; ``metadata.faults`` keeps every fault).
    A fault names the call by the agent's id, which need not be unique: the faults, in the order
    the calls ran, go to the refused calls (an error result) of that id and tool, in order."""
    faults = info.get("faults")
    if not isinstance(faults, list):
        return set()
    pending = [
        (str(f.get("call_id")), str(f.get("tool")))
        for f in faults
        if isinstance(f, dict) and f.get("fault") in STOPPING_FAULTS
    ]
    out: set[int] = set()
    for i, c in enumerate(calls):
        r = results[i] if i < len(results) else None
        if r is None or not r.is_error or not pending:
            continue
        if (r.tool_call_id, c.name) == pending[0] or (c.id, c.name) == pending[0]:
            pending.pop(0)
            out.add(i)
    return out


def _faults(traj: Trajectory) -> list[Any]:
    return [f for s in traj.steps for f in (s.info.get("faults") or [])]


def _side_effects(traj: Trajectory, writes: set[str]) -> list[dict[str, Any]]:
    effects = []
    for step in traj.steps:
        results = step.observation.tool_results
        stopped = _stopped(step.info, step.action.tool_calls, results)
        for i, (c, r) in enumerate(zip(step.action.tool_calls, results, strict=False)):
            if c.name in writes and not r.is_error and i not in stopped:
                args = c.arguments
                if isinstance(args, str):
                    with contextlib.suppress(json.JSONDecodeError, RecursionError):
                        args = json.loads(args or "{}")
                effects.append({"tool": c.name, "arguments": args})
    return effects


def _session(
    traj: Trajectory, info: RunInfo, writes: list[str], task: Task | None, threshold: float
) -> LogSession:
    assert traj.reward is not None
    return LogSession(
        session_id=traj.episode_id,
        messages=_messages(traj),
        tools=traj.tools,
        writes=[w for w in writes if any(t["function"]["name"] == w for t in traj.tools)],
        outcome=Outcome(success=traj.reward >= threshold, reward=traj.reward),
        goal=task.prompt if task is not None else None,
        task=traj.task_id,
        split=task.split if task is not None else "test",
        side_effects=_side_effects(traj, set(writes)),
        metadata={
            "env_id": info.env_id,
            "env_hash": traj.env_hash,
            "agent": traj.agent.name,
            "status": traj.status.value,
            "sample_index": traj.sample_index,
            "gated_by": traj.gated_by,
            **({"faults": faults} if (faults := _faults(traj)) else {}),
        },
    )


def logs_from_run(
    run_dir: str | Path, *, writes: list[str] | None = None, pass_threshold: float = 1.0
) -> Converted:
    """The sessions of every scored episode of ``run_dir`` (a failure of the machinery or the
    environment is left out and counted: its outcome says nothing of the session)."""
    run = RunDir(run_dir)
    spec, named = _load_spec(run.info)
    out = Converted()
    if writes is not None:
        out.writes, out.writes_from = sorted(writes), "--writes"
    elif spec is not None:
        out.writes, out.writes_from = _writes_of(spec), f"the environment {named}"
    else:
        raise ConfigError(
            f"cannot tell which tools of {run.info.env_id!r} write: the run does not record it "
            f"and its environment does not load here ({named}). Pass --writes TOOL,TOOL"
        )
    tasks: dict[str, Task] = {}
    for traj in run.trajectories():
        if not traj.scored:
            why = traj.status.value if not traj.status.scored else "unscored"
            out.skipped[why] = out.skipped.get(why, 0) + 1
            continue
        task = _find_task(spec, run.info, traj.task_id, tasks) if spec is not None else None
        try:
            out.sessions.append(_session(traj, run.info, out.writes, task, pass_threshold))
        except ValidationError as e:  # e.g. an episode in which no user ever spoke
            why = f"not a session: {e.errors()[0]['msg'].removeprefix('Value error, ')}"
            out.skipped[why] = out.skipped.get(why, 0) + 1
    if not out.sessions:
        raise ConfigError(f"{run_dir} holds no scored episode to write as a session")
    # the run file holds episodes in the order they finished; the logs hold them in one order
    # (which session answers a call several logged depends on it)
    out.sessions.sort(key=lambda s: (s.task or "", s.session_id))
    return out
