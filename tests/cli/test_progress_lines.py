"""Progress where a bar cannot redraw (stderr is a CI log or a pipe): a line when the episodes
start, then at least every 30 s, and at the end. A fake clock: nothing sleeps."""

from __future__ import annotations

import io

from rich.console import Console

from envlab.cli import progress as progress_mod
from envlab.cli.progress import RunProgress
from envlab.core import EpisodeRecord, Status


def _record(reward: float, status: Status = Status.OK) -> EpisodeRecord:
    return EpisodeRecord("e", "t", 0, status.value, reward, 1, 0)


def test_a_line_every_30_seconds_when_not_a_terminal() -> None:
    out = io.StringIO()
    now = [100.0]
    bar = RunProgress(console=Console(file=out, force_terminal=False, width=200))
    bar.clock = lambda: now[0]
    assert bar.log_lines
    with bar:
        bar.started(4, [])
        bar.finished(_record(1.0))  # 0 s after the first line: no line
        now[0] += 31
        bar.finished(_record(0.0))
        now[0] += 5
        bar.finished(_record(0.0, Status.TIMEOUT))
    text = out.getvalue().splitlines()  # (rich draws the final bar once at the end, as before)
    lines = [x for x in text if x.startswith("episodes ") and "━" not in x]
    assert lines[0] == "episodes 0/4 pass -, 0s"
    assert lines[1] == "episodes 2/4 pass 50.0%, 31s"
    assert lines[-1] == "episodes 3/4 pass 33.3% timeout=1, 36s"  # a timeout is scored
    assert len(lines) == 3


def test_no_lines_on_a_terminal() -> None:
    out = io.StringIO()
    bar = RunProgress(console=Console(file=out, force_terminal=True, width=100))
    assert not bar.log_lines and progress_mod.LOG_EVERY_S == 30.0
