"""Measurement: estimators and summaries read from trajectories, never from environments."""

from envlab.measure.estimators import pass_at_k, pass_hat_k
from envlab.measure.summary import Summary, TaskStats, is_pass, summarize

__all__ = ["Summary", "TaskStats", "is_pass", "pass_at_k", "pass_hat_k", "summarize"]
