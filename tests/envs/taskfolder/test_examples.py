"""Every example task passes its self-check: oracle 1.0 over 5 runs, no-op 0.0."""

from __future__ import annotations

import pytest

from envlab.cli.task_runs import check
from envlab.envs.taskfolder import find_task_folders
from tests.envs.taskfolder.conftest import EXAMPLES
from tests.sandbox.conftest import requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning"),
]


def test_there_are_at_least_eight_examples_of_different_kinds() -> None:
    folders = find_task_folders(EXAMPLES)
    assert len(folders) >= 8
    categories = {f.config.metadata.get("category") for f in folders}
    assert {"files", "shell", "data", "sql", "programming"} <= categories
    assert all(f.solution is not None for f in folders)


async def test_oracle_scores_one_on_five_runs_and_noop_zero() -> None:
    rows = await check(EXAMPLES, runs=5, noop_runs=1, concurrency=4)
    assert len(rows) >= 8
    for row in rows:
        assert [e.reward for e in row.oracle] == [1.0] * 5, (row.task_id, row.problems)
        assert [e.reward for e in row.noop] == [0.0], (row.task_id, row.problems)
        assert row.ok, (row.task_id, row.problems)
