"""``compare_runs`` and ``envlab compare`` on real runs of the same environment."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
from scipy import stats
from typer.testing import CliRunner

from envlab.cli.measure_cmds import compare_cmd
from envlab.core import ConfigError, NotFoundError, StoreError
from envlab.measure import compare_runs, load_run
from tests.measure.runs import make_run

SKILLED = "tests.measure.runs:SkilledAgent"

app = typer.Typer()
app.command("compare")(compare_cmd)
app.command("noop")(lambda: None)  # two commands, so typer keeps the command name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    return {
        "oracle": make_run(root / "oracle", "arith", "oracle", tasks=60),
        "random": make_run(root / "random", "arith", "random", tasks=60),
        "noop": make_run(root / "noop", "arith", "noop", tasks=60),
        "calc-random": make_run(root / "calc-random", "calc", "random", tasks=10),
        "skill-0.6": make_run(
            root / "skill-0.6", "arith", SKILLED, tasks=60, samples=3, agent_args={"skill": 0.6}
        ),
        "skill-0.8": make_run(
            root / "skill-0.8", "arith", SKILLED, tasks=60, samples=3, agent_args={"skill": 0.8}
        ),
    }


def test_different_agents_give_a_paired_ci(runs: dict[str, Path]) -> None:
    c = compare_runs(runs["random"], runs["oracle"])
    assert c.n_shared == 60 and c.unit == "points" and c.scale == 100
    assert c.test == "McNemar exact" and c.mcnemar is not None
    assert c.mcnemar.b_only == 60 - c.mcnemar.both
    assert c.significant and c.p_value is not None and c.p_value < 1e-10
    assert c.paired.low is not None and c.paired.high is not None
    assert 0 < c.paired.low <= c.paired.diff <= c.paired.high <= 1.0
    assert c.verdict.startswith("B is better by ")
    assert f"95% CI {c.paired.low * 100:.1f} to {c.paired.high * 100:.1f}" in c.verdict
    assert any("hidden answers" in n for n in c.notes)
    flipped = compare_runs(runs["oracle"], runs["random"])
    assert flipped.verdict.startswith("A is better by ")


def test_paired_ci_over_task_means_with_several_samples(runs: dict[str, Path]) -> None:
    c = compare_runs(runs["skill-0.6"], runs["skill-0.8"], target=0.05)
    assert c.test == "paired t" and c.mcnemar is None and c.a.samples == 3
    assert c.a.agent == "skilled-0.6" and c.b.agent == "skilled-0.8"
    # several samples per task: within-task variance is known, so samples can be weighed
    assert c.variance is not None and c.variance["within"] > 0
    assert c.tasks_needed is not None and c.tasks_needed > 60
    a, b = load_run(runs["skill-0.6"]), load_run(runs["skill-0.8"])
    ra, rb = a.rewards_by_task(), b.rewards_by_task()
    tasks = sorted(ra)
    xa = np.array([np.mean(ra[t]) for t in tasks])
    xb = np.array([np.mean(rb[t]) for t in tasks])
    ref = stats.ttest_rel(xb, xa)
    ci = ref.confidence_interval()
    assert c.paired.diff == pytest.approx(float((xb - xa).mean()))
    assert (c.paired.low, c.paired.high) == pytest.approx((ci.low, min(ci.high, 1.0)))


def test_no_detectable_difference_says_how_many_tasks_would_tell(runs: dict[str, Path]) -> None:
    c = compare_runs(runs["noop"], runs["random"])
    if c.paired.sd_diff == 0:
        assert "scored the same" in c.verdict
        return
    assert not c.significant
    assert c.verdict.startswith("no detectable difference")
    assert c.more_tasks_needed is not None and c.more_tasks_needed > 0
    assert f"{c.more_tasks_needed} more tasks needed to detect" in c.verdict
    assert c.tasks_needed == 60 + c.more_tasks_needed
    planned = compare_runs(runs["noop"], runs["random"], target=0.2)
    assert planned.target == 0.2 and planned.tasks_needed is not None
    assert planned.tasks_needed < c.tasks_needed


def test_only_shared_tasks_are_paired(tmp_path: Path, runs: dict[str, Path]) -> None:
    short = make_run(tmp_path / "short", "arith", "oracle", tasks=20)
    c = compare_runs(runs["random"], short)
    assert (c.n_shared, c.n_only_a, c.n_only_b) == (20, 40, 0)


def test_refuses_runs_without_shared_tasks(tmp_path: Path, runs: dict[str, Path]) -> None:
    other = make_run(tmp_path / "seed1", "arith", "random", tasks=10, seed=1)
    with pytest.raises(ConfigError, match=r"share no tasks.*same task set"):
        compare_runs(runs["random"], other)


def test_refuses_different_environment_content_unless_forced(
    tmp_path: Path, runs: dict[str, Path]
) -> None:
    level1 = make_run(tmp_path / "level1", "arith", "random", tasks=10, env_args={"level": 1})
    with pytest.raises(ConfigError, match=r"environment content differs.*--force"):
        compare_runs(runs["random"], level1)
    c = compare_runs(runs["random"], level1, force=True)
    assert c.n_shared == 10 and any(n.startswith("forced") for n in c.notes)


def test_unreadable_runs_are_explained(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no run directory"):
        load_run(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="not a run directory"):
        load_run(tmp_path / "empty")


def test_cli_table_and_json(runs: dict[str, Path]) -> None:
    r = CliRunner().invoke(app, ["compare", str(runs["random"]), str(runs["oracle"])],
                           env={"COLUMNS": "200"})  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "B is better by" in r.output and "McNemar exact" in r.output and "95% CI" in r.output
    r = CliRunner().invoke(app, ["compare", str(runs["noop"]), str(runs["random"]), "--json",
                                 "--target", "10"])  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["n_shared"] == 60 and data["target"] == pytest.approx(0.1)
    assert {"paired", "verdict", "p_value", "tasks_needed"} <= set(data)


def test_cli_errors(tmp_path: Path, runs: dict[str, Path]) -> None:
    r = CliRunner().invoke(app, ["compare", str(runs["random"]), str(runs["calc-random"])])
    assert isinstance(r.exception, ConfigError) and "--force" in str(r.exception)
    r = CliRunner().invoke(app, ["compare", str(runs["random"]), str(runs["oracle"]),
                                 "--confidence", "95"])  # fmt: skip
    assert isinstance(r.exception, ConfigError) and "between 0 and 1" in str(r.exception)
