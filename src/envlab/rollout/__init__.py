"""The async engine: the one episode driver, runs into a run directory, timeouts, retries."""

from envlab.rollout.driver import (
    PlannedEpisode,
    episode_ids,
    episode_ids_in_group,
    group_id,
    run_episode,
    run_episodes,
    watch,
)
from envlab.rollout.episode import EpisodeConfig, EpisodeHooks
from envlab.rollout.runner import (
    RUN_FILE,
    TRAJECTORIES_FILE,
    RolloutResult,
    RunInfo,
    RunObserver,
    load_run_info,
    rollout,
)
from envlab.rollout.store import TrajectoryStore

__all__ = [
    "RUN_FILE",
    "TRAJECTORIES_FILE",
    "EpisodeConfig",
    "EpisodeHooks",
    "PlannedEpisode",
    "RolloutResult",
    "RunInfo",
    "RunObserver",
    "TrajectoryStore",
    "episode_ids",
    "episode_ids_in_group",
    "group_id",
    "load_run_info",
    "rollout",
    "run_episode",
    "run_episodes",
    "watch",
]
