"""The data a report embeds: small columnar arrays for charts, one JSON line per episode.

Charts need a few numbers per episode, the viewer needs one whole episode at a time. So the
numbers go in columns (task index, sample, status, reward) that the page reads at once, and each
episode's transcript is one JSON line that the page parses only when someone opens it. Strings
repeated across episodes (system prompts, task prompts) are stored once per run.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from envlab import __version__
from envlab.core import ConfigError, EpisodeError, Status, StepRecord, Trajectory
from envlab.measure.compare import compare_runs
from envlab.measure.runs import Run
from envlab.measure.summary import CIMethod, is_pass

STATUSES = [s.value for s in Status]
SHARED_MIN_CHARS = 64
"""Message texts at least this long that occur twice or more are stored once per run."""


def _clip(value: Any, max_chars: int) -> Any:
    """Cut long strings (and inline images) so one huge tool output cannot bloat the file;
    non-finite numbers become ``null`` (JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        if value.startswith("data:") and len(value) > 256:
            return f"[inline data, {len(value):,} characters, omitted from the report]"
        if len(value) > max_chars:
            cut = len(value) - max_chars
            return value[:max_chars] + f"\n[... {cut:,} more characters cut from the report]"
        return value
    if isinstance(value, dict):
        return {k: _clip(v, max_chars) for k, v in value.items()}
    if isinstance(value, list):
        return [_clip(v, max_chars) for v in value]
    return value


class _Strings:
    """A per-run table of message texts that repeat across episodes."""

    def __init__(self, trajectories: Sequence[Trajectory], max_chars: int) -> None:
        counts: Counter[str] = Counter(
            m["content"]
            for t in trajectories
            for m in t.messages
            if isinstance(m.get("content"), str) and len(m["content"]) >= SHARED_MIN_CHARS
        )
        self.table: list[str] = []
        self.index: dict[str, int] = {}
        for text, n in counts.items():
            if n > 1:
                self.index[text] = len(self.table)
                self.table.append(_clip(text, max_chars))


def _r(x: float) -> float:
    return round(x, 4)


def episode_detail(t: Trajectory, strings: _Strings, max_chars: int) -> dict[str, Any]:
    """What the viewer shows of one episode (token ids are summarized, not embedded)."""
    messages = []
    for m in t.messages:
        content = m.get("content")
        shared = strings.index.get(content) if isinstance(content, str) else None
        if shared is None:
            messages.append(_clip(m, max_chars))
        else:
            messages.append({**_clip({**m, "content": None}, max_chars), "content": {"$": shared}})
    steps = []
    for s, start in zip(t.steps, step_starts(t.steps, len(t.messages)), strict=True):
        step: dict[str, Any] = {"m": start, "r": _clip(s.reward, 0), "as": _r(s.agent_s)}
        step["es"] = _r(s.env_s)
        if s.message_index is None:
            step["nm"] = 1  # no model turn of its own (the harness acted)
        if s.tool_errors:
            step["te"] = s.tool_errors
        if s.info:
            step["info"] = _clip(s.info, max_chars)
        if s.action.info:
            step["ai"] = _clip(s.action.info, max_chars)
        steps.append(step)
    out: dict[str, Any] = {
        "id": t.episode_id,
        "task": t.task_id,
        "sample": t.sample_index,
        "seed": t.seed,
        "status": t.status.value,
        "reward": _clip(t.reward, 0),
        "comp": _clip(t.components, 0),
        "gated_by": t.gated_by,
        "error": error_detail(t.error, max_chars),
        "grader_failed": _clip(t.grader_failed, max_chars),
        "attempts": t.attempts,
        "time": {
            k: _r(getattr(t.timings, k)) for k in ("duration_s", "agent_s", "env_s", "grade_s")
        },
        "messages": messages,
        "steps": steps,
    }
    if t.tokens is not None:
        out["tokens"] = {
            "prompt": len(t.tokens.prompt_ids),
            "completion": len(t.tokens.completion_ids),
        }
    if t.info:
        out["info"] = _clip(t.info, max_chars)
    return out


def step_starts(steps: Sequence[StepRecord], n_messages: int) -> list[int]:
    """Where each step's messages start: its model reply, or, for a step without one (a
    harness limit acting), where the next step's start (its slice of the transcript is empty)."""
    starts: list[int] = []
    following = n_messages
    for s in reversed(steps):
        if s.message_index is not None:
            following = min(s.message_index, n_messages)
        starts.append(following)
    return starts[::-1]


def error_detail(e: EpisodeError | None, max_chars: int) -> dict[str, str] | None:
    if e is None:
        return None
    return {
        "kind": e.kind,
        "phase": e.phase,
        "line": _clip(e.describe(), max_chars),
        "message": _clip(e.message, max_chars),
    }


def first_errors(trajectories: Sequence[Trajectory], max_chars: int) -> dict[str, str]:
    """For each failure status (and ``grader_failed``), the error of its first episode."""
    first: dict[str, str] = {}
    for t in trajectories:
        if t.error is not None and t.status is not Status.OK:
            first.setdefault(t.status.value, _clip(t.error.describe(), max_chars))
        if t.grader_failed:
            headline = (t.grader_failed.strip().splitlines() or [""])[0]
            first.setdefault("grader_failed", _clip(headline, max_chars))
    return first


def to_json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _components(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """The mean of each reward component over the scored episodes that report it."""
    sums: dict[str, list[float]] = {}
    for t in trajs:
        if t.scored:
            for k, v in t.components.items():
                if math.isfinite(v):
                    sums.setdefault(k, []).append(v)
    return {k: sum(v) / len(v) for k, v in sorted(sums.items())}


@dataclass(frozen=True, slots=True)
class ReportOptions:
    confidence: float = 0.95
    ci_method: CIMethod = "clt"
    max_chars: int = 20_000


def run_data(
    run: Run, label: str, task_index: dict[str, int], options: ReportOptions
) -> tuple[dict[str, Any], str]:
    """One run's part of the report: its numbers and columns, and its episodes' JSON lines."""
    max_chars = options.max_chars
    trajs = sorted(run.trajectories or [], key=lambda t: (t.task_id, t.sample_index))
    strings = _Strings(trajs, max_chars)
    summary = run.summarize(confidence=options.confidence, ci_method=options.ci_method)
    status_index = {s: i for i, s in enumerate(STATUSES)}
    data = {
        "label": label,
        "path": str(run.path),
        "env_id": run.info.env_id,
        "env_hash": run.info.env_hash,
        "agent": run.info.agent.model_dump(mode="json"),
        "info": run.info.model_dump(mode="json", exclude={"task_ids", "agent"}),
        "summary": summary.model_dump(mode="json", exclude={"tasks"}),
        "components": _components(trajs),
        "notes": run.notes,
        "strings": strings.table,
        "first_errors": first_errors(trajs, max_chars),
        "ep": {
            "task": [task_index[t.task_id] for t in trajs],
            "sample": [t.sample_index for t in trajs],
            "status": [status_index[t.status.value] for t in trajs],
            "reward": [_clip(t.reward, 0) for t in trajs],
            "pass": [int(t.scored and is_pass(t.reward, run.pass_threshold)) for t in trajs],
            "steps": [t.n_steps for t in trajs],
        },
    }
    lines = "\n".join(to_json(episode_detail(t, strings, max_chars)) for t in trajs)
    return data, lines


def build_report_data(
    runs: Sequence[Run],
    *,
    title: str | None = None,
    confidence: float = 0.95,
    ci_method: CIMethod = "clt",
    max_chars: int = 20_000,
) -> tuple[dict[str, Any], list[str]]:
    """The report's data: one JSON document, and per run the episodes as JSON lines."""
    if not runs:
        raise ConfigError("a report needs at least one run directory")
    if max_chars < 100:
        raise ConfigError(f"--max-chars must be at least 100, got {max_chars}")
    tasks = sorted({r.task_id for run in runs for r in run.records})
    task_index = {t: i for i, t in enumerate(tasks)}
    options = ReportOptions(confidence, ci_method, max_chars)
    names = [run.name for run in runs]
    out_runs: list[dict[str, Any]] = []
    episode_lines: list[str] = []
    for i, run in enumerate(runs):
        label = names[i] if names.count(names[i]) == 1 else f"{names[i]} #{i + 1}"
        data, lines = run_data(run, label, task_index, options)
        out_runs.append(data)
        episode_lines.append(lines)
    comparisons = []
    for j, run in enumerate(runs[1:], start=1):
        pair = {"label_a": out_runs[0]["label"], "label_b": out_runs[j]["label"]}
        try:
            c = compare_runs(runs[0], run, confidence=confidence)
            comparisons.append({**pair, **c.model_dump(mode="json")})
        except ConfigError as e:
            comparisons.append({**pair, "error": str(e)})
    data = {
        "title": title or "envlab report: " + ", ".join(r["label"] for r in out_runs),
        "generated_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "envlab_version": __version__,
        "confidence": confidence,
        "statuses": STATUSES,
        "tasks": tasks,
        "runs": out_runs,
        "comparisons": comparisons,
    }
    return data, episode_lines
