"""verl's reward function over an envlab ``--format verl`` export: each rollout's reply graded
as the answer of one episode of its row's task, by the environment's own grader; what grading
cannot vouch for raises rather than scores (a forged or stale row, another environment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import envlab
from envlab.core import ConfigError
from envlab.export import ExportOptions, export_run
from envlab.export.verl_reward import compute_score
from envlab.runs import RunDir

pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], RunDir]:
    out = tmp_path_factory.mktemp("verl")
    envlab.evaluate("arith", "oracle", tasks=4, samples=2, out=out / "run")
    run = RunDir(out / "run")
    export_run(run, out / "verl.parquet", ExportOptions(format="verl"))
    return pq.read_table(out / "verl.parquet").to_pylist(), run


def score(row: dict[str, Any], reply: str, **info: Any) -> float:
    return compute_score(
        data_source=row["data_source"],
        solution_str=reply,
        ground_truth=row["reward_model"]["ground_truth"],
        extra_info={**row["extra_info"], **info},
    )


def test_the_right_answer_scores_as_envlab_graded_it_and_a_wrong_one_0(
    rows: tuple[list[dict[str, Any]], RunDir],
) -> None:
    table, run = rows
    answers = {t.task_id: t.messages[-1]["content"] for t in run.trajectories()}
    rewards = {t.task_id: t.reward for t in run.trajectories()}
    assert len(table) == 4
    for row in table:
        task = row["reward_model"]["ground_truth"]
        assert score(row, answers[task]) == rewards[task] == 1.0
        assert score(row, "I do not know") == 0.0
        assert score(row, "") == 0.0


def test_rows_grading_cannot_vouch_for_raise(rows: tuple[list[dict[str, Any]], RunDir]) -> None:
    row = rows[0][0]
    with pytest.raises(ConfigError, match="content hash"):  # other code, or a forged hash
        score(row, "1", env_hash="0" * 16)
    with pytest.raises(ConfigError, match="no task"):
        compute_score(row["data_source"], "1", "arith-test-0-99999", row["extra_info"])
    with pytest.raises(ConfigError, match="other tasks than the run's"):
        score(row, "1", task_set_hash="f" * 16)
    with pytest.raises(ConfigError, match="not an envlab export"):
        compute_score("openai/gsm8k", "1", row["reward_model"]["ground_truth"], row["extra_info"])
    with pytest.raises(ConfigError, match="lacks task_seed"):
        info = {k: v for k, v in row["extra_info"].items() if k != "task_seed"}
        compute_score(row["data_source"], "1", row["reward_model"]["ground_truth"], info)


def test_the_reward_file_is_what_verls_loader_imports() -> None:
    # verl: custom_reward_function.path=FILE, .name=compute_score; it imports FILE by path
    import importlib.util

    from envlab.export import verl_reward

    spec = importlib.util.spec_from_file_location("custom_module", Path(verl_reward.__file__))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert callable(module.compute_score)
