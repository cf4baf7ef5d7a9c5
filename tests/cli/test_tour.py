"""``envlab tour``, the README's main job: every planted flaw is thrown out for its reason and the
clean environment survives; the trained policy beats the random one on held-out tasks; the
report holds the verdicts and the runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.tour.invoices import TOUR_ENVS
from envlab.tour.run import TourConfig, TourResult, run_tour
from tests.cli.test_eval_cli import envlab


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> TourResult:
    import asyncio

    cfg = TourConfig(
        tmp_path_factory.mktemp("tour") / "t", train_steps=25, heldout_tasks=120, model=False
    )
    return asyncio.run(run_tour(cfg))


def test_the_clean_environment_survives_and_each_flaw_is_thrown_out_for_its_reason(
    tour: TourResult,
) -> None:
    rows = {r.env_id: r for r in tour.vet}
    assert list(rows) == [cls.id for cls in TOUR_ENVS]
    assert rows["invoices"].verdicts == {"ok": 12} and not rows["invoices"].reasons
    expected = {  # env -> (verdict of every task, a word of its reason)
        "invoices-debug": ("quarantine", "answer_leak"),
        "invoices-effort": ("quarantine", "paid_by_actions"),
        "invoices-format": ("trivial", "trivial_strategies"),
    }
    for env_id, (verdict, word) in expected.items():
        row = rows[env_id]
        assert row.verdicts == {verdict: 12}, (env_id, row.verdicts, row.reasons)
        assert any(word in r for r in row.reasons), (env_id, row.reasons)


def test_the_trained_policy_beats_random_on_held_out_tasks_paired(tour: TourResult) -> None:
    names = [r.name for r in tour.heldout.rows]
    assert names == ["trained", "random", "optimum"]
    vs_random = next(p for p in tour.heldout.paired if p.a == "random")
    assert vs_random.low is not None and vs_random.low > 0, vs_random  # trained - random > 0
    assert tour.model_heldout is None


def test_the_report_holds_the_verdicts_the_curve_and_the_runs(tour: TourResult) -> None:
    text = tour.report.read_text()
    assert "<section class='vetting'>" in text and "<section class='training'>" in text
    for cls in TOUR_ENVS:
        assert cls.id in text
    assert "paid_by_actions" in text


def test_the_command_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("kept")
    r = envlab("tour", "--out", str(tmp_path), "--no-model")
    assert r.returncode == 2 and "not empty" in r.stderr
    assert (tmp_path / "x").read_text() == "kept"
