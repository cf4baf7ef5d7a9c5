"""Moved to :mod:`envlab.runs`; this name stays until rollout imports from ``envlab.runs``."""

from envlab.runs import BLOB_MIN_CHARS, BLOBS_DIR, LOCK_FILE, RunLock, TrajectoryStore

__all__ = ["BLOBS_DIR", "BLOB_MIN_CHARS", "LOCK_FILE", "RunLock", "TrajectoryStore"]
