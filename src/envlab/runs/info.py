"""``run.json``: what a run directory holds, and the names of its files."""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from envlab.core import AgentSpec, StoreError
from envlab.runs.errors import first_error

RUN_FILE = "run.json"
TRAJECTORIES_FILE = "trajectories.jsonl"
SUMMARY_FILE = "summary.json"
VET_FILE = "vet.json"
"""What ``envlab vet`` writes in its directory (the report reads it too)."""


class RunInfo(BaseModel):
    """``run.json``: everything needed to know what was run, and to resume it."""

    command: list[str]
    envlab_version: str
    env_id: str
    env_hash: str
    env_config: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSpec
    seed: int
    samples: int
    n_tasks: int
    task_set_hash: str
    task_ids: list[str]
    concurrency: int
    episode_config: dict[str, Any]
    created_at: float
    resumed_at: list[float] = Field(default_factory=list)

    def identity(self) -> dict[str, Any]:
        """The fields a resumed run must share with the original."""
        return {
            "env_id": self.env_id,
            "env_hash": self.env_hash,
            "agent": self.agent.model_dump(),
            "seed": self.seed,
            "samples": self.samples,
            "task_set_hash": self.task_set_hash,
            "model_failures": self.episode_config.get("model_failures", "agent"),
        }


def load_run_info(run_dir: str | Path) -> RunInfo:
    """The ``run.json`` of ``run_dir``; ``StoreError`` when it is missing or corrupt."""
    path = Path(run_dir) / RUN_FILE
    try:
        return RunInfo.model_validate_json(path.read_text())
    except FileNotFoundError:
        raise StoreError(
            f"{run_dir} is not a run directory: it has no {RUN_FILE}. "
            "Pass a directory written by `envlab eval --out DIR`."
        ) from None
    except OSError as e:
        raise StoreError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise StoreError(
            f"{path} is corrupt ({first_error(e)}): it cannot be read or resumed. Restore it, "
            "or run again into a new --out."
        ) from None


def write_run_info(run_dir: str | Path, info: RunInfo) -> None:
    """``run.json``, replaced atomically: a full disk never leaves half of it."""
    run_dir = Path(run_dir)
    path, tmp = run_dir / RUN_FILE, run_dir / f".{RUN_FILE}.tmp"
    try:
        tmp.write_text(info.model_dump_json(indent=2))
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):  # the error to report is the first one
            tmp.unlink(missing_ok=True)
        what = "the disk is full" if e.errno == errno.ENOSPC else e.strerror or str(e)
        raise StoreError(
            f"cannot write {path}: {what}. Free some space (or fix the directory), then run "
            "again (with --resume if it holds episodes)."
        ) from e


def safe_name(name: str, max_chars: int | None = None) -> str:
    """``name`` (a task id, an environment name such as ``examples/tasks/``) as one file name:
    every character but letters, digits and ``-_.`` becomes ``_``; the last ``max_chars``."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name.rstrip("/"))
    return safe if max_chars is None else safe[-max_chars:]
