"""envlab from Python: ``envlab.evaluate`` and ``envlab.vet_env`` do what ``envlab eval`` and
``envlab vet`` do, by name or with the objects, and close what they open."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import envlab
from envlab.agents import load_agent
from envlab.core import ConfigError
from envlab.envs import load_env


def test_evaluate_by_name_writes_the_run_the_cli_writes(tmp_path: Path) -> None:
    ev = envlab.evaluate("calc", "oracle", tasks=3, samples=2, out=tmp_path / "r")
    assert ev.summary.n_episodes == 6 and ev.summary.mean_reward == 1.0
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert run["env_id"] == "calc" and run["agent"]["name"] == "oracle"
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["mean_reward"] == 1.0


def test_evaluate_takes_the_objects_and_refuses_args_it_cannot_apply(tmp_path: Path) -> None:
    ev = envlab.evaluate(load_env("arith"), load_agent("noop"), tasks=4, out=tmp_path / "n")
    assert ev.summary.mean_reward == 0.0
    with pytest.raises(ConfigError, match="env_args"):
        envlab.evaluate(load_env("arith"), "noop", env_args={"x": 1}, out=tmp_path / "m")


def test_vet_flags_the_planted_leak_with_the_vet_package_imported(tmp_path: Path) -> None:
    import envlab.vet.runner  # the subpackage: envlab.vet is now that module, not a function
    from envlab.tour.invoices import InvoicesDebugField

    assert callable(envlab.vet_env) and callable(envlab.run_tour)
    report = envlab.vet_env(InvoicesDebugField(), out=tmp_path / "v", tasks=3, oracle_runs=2)
    assert {t.verdict for t in report.tasks} == {"quarantine"}
    assert (tmp_path / "v" / "vet.json").is_file()
