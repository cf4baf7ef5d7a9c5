"""The async engine: episodes, groups, concurrency, timeouts, retries, the trajectory store."""

from envlab.rollout.episode import EpisodeConfig, EpisodeHooks, episode_ids, run_episode
from envlab.rollout.runner import (
    RUN_FILE,
    TRAJECTORIES_FILE,
    RolloutResult,
    RunInfo,
    load_run_info,
    rollout,
)
from envlab.rollout.store import TrajectoryStore

__all__ = [
    "RUN_FILE",
    "TRAJECTORIES_FILE",
    "EpisodeConfig",
    "EpisodeHooks",
    "RolloutResult",
    "RunInfo",
    "TrajectoryStore",
    "episode_ids",
    "load_run_info",
    "rollout",
    "run_episode",
]
