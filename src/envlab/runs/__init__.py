"""The run directory: ``run.json``, the trajectory store, its lock and blobs; loading runs."""

from envlab.runs.store import BLOB_MIN_CHARS, BLOBS_DIR, LOCK_FILE, RunLock, TrajectoryStore

__all__ = ["BLOBS_DIR", "BLOB_MIN_CHARS", "LOCK_FILE", "RunLock", "TrajectoryStore"]
