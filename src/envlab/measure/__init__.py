"""Measurement: estimators and summaries read from trajectories, never from environments."""

from envlab.measure.compare import Comparison, compare_runs
from envlab.measure.estimators import pass_at_k, pass_hat_k
from envlab.measure.gate import GateResult, evaluate_gate
from envlab.measure.paired import (
    McNemar,
    PairedDifference,
    mcnemar,
    mcnemar_exact,
    paired_difference,
)
from envlab.measure.power import (
    VarianceComponents,
    minimum_detectable_difference,
    paired_variance_components,
    samples_needed,
    tasks_needed,
    variance_components,
)
from envlab.measure.runs import Run, load_run
from envlab.measure.stats import Estimate, bootstrap_mean_ci, mean_ci, proportion_ci
from envlab.measure.summary import PASS_TOLERANCE, Summary, TaskStats, is_pass, summarize

__all__ = [
    "PASS_TOLERANCE",
    "Comparison",
    "Estimate",
    "GateResult",
    "McNemar",
    "PairedDifference",
    "Run",
    "Summary",
    "TaskStats",
    "VarianceComponents",
    "bootstrap_mean_ci",
    "compare_runs",
    "evaluate_gate",
    "is_pass",
    "load_run",
    "mcnemar",
    "mcnemar_exact",
    "mean_ci",
    "minimum_detectable_difference",
    "paired_difference",
    "paired_variance_components",
    "pass_at_k",
    "pass_hat_k",
    "proportion_ci",
    "samples_needed",
    "summarize",
    "tasks_needed",
    "variance_components",
]
