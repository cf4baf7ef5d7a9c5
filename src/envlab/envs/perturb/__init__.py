"""Perturbations: seeded faults between a ``ToolEnv`` and its tools, as a wrapper.

    from envlab.envs.perturb import parse_perturbations, perturb
    spec2 = perturb(spec, parse_perturbations("timeout=0.1,stale=0.2"))
    spec2.content_hash() != spec.content_hash()

Each fault an episode meets is in its step's ``info["faults"]``: ``{"fault", "step", "tool",
"call_id", ...details}``. ``docs/robustness.md`` describes every perturbation.
"""

from __future__ import annotations

from envlab.envs.perturb.base import RETRYABLE_MARK, CallContext, Perturbation, SupportsSnapshot
from envlab.envs.perturb.faults import (
    Latency,
    Malformed,
    RateLimit,
    Stale,
    Timeout,
    Transient,
    Truncate,
)
from envlab.envs.perturb.inject import Inject
from envlab.envs.perturb.parse import PERTURBATIONS, parse_perturbations, usage
from envlab.envs.perturb.wrapper import Perturbed, PerturbedSpec, check_env, perturb

__all__ = [
    "PERTURBATIONS",
    "RETRYABLE_MARK",
    "CallContext",
    "Inject",
    "Latency",
    "Malformed",
    "Perturbation",
    "Perturbed",
    "PerturbedSpec",
    "RateLimit",
    "Stale",
    "SupportsSnapshot",
    "Timeout",
    "Transient",
    "Truncate",
    "check_env",
    "parse_perturbations",
    "perturb",
    "usage",
]
