"""A train run's report shows its reward curve, its totals and the held-out comparison."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path

import pytest

from envlab.report import write_report
from envlab.train.loop import TrainConfig, train
from tests.support.bandit import BanditEnv, TableLearner

pytest.importorskip("torch")


def test_report_of_a_train_run_inlines_its_reward_plot(tmp_path: Path) -> None:
    env = BanditEnv()
    config = TrainConfig(steps=4, groups_per_step=2, group_size=4)
    asyncio.run(train(env, env.tasks(), TableLearner(), out_dir=tmp_path / "run", config=config))
    page = (tmp_path / "r.html").as_posix()
    write_report([tmp_path / "run"], page)
    text = Path(page).read_text()
    m = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", text)
    assert m and base64.b64decode(m.group(1)) == (tmp_path / "run" / "reward.png").read_bytes()
    assert "learner steps</td><td>4</td>" in text
    assert "samples by staleness" in text
