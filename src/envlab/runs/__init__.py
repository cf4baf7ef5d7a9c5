"""The run directory: its files, ``run.json``, the trajectory store with its lock and blobs, and
reading a run back as a stream. Below everything that writes or reads runs; imports only core.

    run.json             RunInfo: what was run, and what a ``--resume`` must match
    trajectories.jsonl   TrajectoryStore: one Trajectory per line, append-only
    blobs/<sha256>       long message strings, stored once per run
    lock                 RunLock: the one writer's flock
    summary.json         what measure wrote of the run
"""

from envlab.runs.blobs import BLOB_MIN_CHARS, BLOBS_DIR
from envlab.runs.info import (
    RUN_FILE,
    SUMMARY_FILE,
    TRAJECTORIES_FILE,
    VET_FILE,
    RunInfo,
    load_run_info,
    safe_name,
    write_run_info,
)
from envlab.runs.lock import LOCK_FILE, RunLock
from envlab.runs.rundir import RunDir
from envlab.runs.store import TrajectoryStore

__all__ = [
    "BLOBS_DIR",
    "BLOB_MIN_CHARS",
    "LOCK_FILE",
    "RUN_FILE",
    "SUMMARY_FILE",
    "TRAJECTORIES_FILE",
    "VET_FILE",
    "RunDir",
    "RunInfo",
    "RunLock",
    "TrajectoryStore",
    "load_run_info",
    "safe_name",
    "write_run_info",
]
