"""A tiny verifiers 0.4 environment (taskset ``envlab-vf-fixture``), written with verifiers'
own API: an in-memory arithmetic dataset, a rule-based ``\\boxed{}`` reward and a weighted
format reward. Loaded by verifiers as any installed taskset: ``import envlab_vf_fixture``."""

from envlab_vf_fixture.taskset import ArithData, ArithTask, ArithTaskset

__all__ = ["ArithData", "ArithTask", "ArithTaskset"]
