"""The async engine: the one episode driver, runs into a run directory, timeouts, retries."""

from envlab.rollout.config import EpisodeConfig, EpisodeHooks
from envlab.rollout.driver import (
    PlannedEpisode,
    episode_ids,
    episode_ids_in_group,
    group_id,
    run_episode,
    run_episodes,
    watch,
)
from envlab.rollout.runner import RolloutResult, RunObserver, rollout

__all__ = [
    "EpisodeConfig",
    "EpisodeHooks",
    "PlannedEpisode",
    "RolloutResult",
    "RunObserver",
    "episode_ids",
    "episode_ids_in_group",
    "group_id",
    "rollout",
    "run_episode",
    "run_episodes",
    "watch",
]
