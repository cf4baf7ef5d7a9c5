"""Environments simulated from production logs (docs/logs.md).

    from envlab.envs.replay import read_logs, build_sim, load_replay_env, logs_from_run

``read_logs`` checks a JSONL log file (one session per line, ``format.py``); ``build_sim``
writes a replay directory that ``envlab eval DIR`` loads (``load_replay_env``); ``logs_from_run``
turns any envlab run directory into logs.
"""

from envlab.envs.replay.convert import logs_from_run
from envlab.envs.replay.format import (
    LogFormatError,
    LogMessage,
    LogSession,
    Outcome,
    read_logs,
    write_logs,
)
from envlab.envs.replay.spec import (
    ReplayConfig,
    ReplayManifest,
    ReplaySpec,
    build_sim,
    is_replay_dir,
    load_replay_env,
)

__all__ = [
    "LogFormatError",
    "LogMessage",
    "LogSession",
    "Outcome",
    "ReplayConfig",
    "ReplayManifest",
    "ReplaySpec",
    "build_sim",
    "is_replay_dir",
    "load_replay_env",
    "logs_from_run",
    "read_logs",
    "write_logs",
]
