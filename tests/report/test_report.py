"""``envlab report``: one self-contained HTML file, checked in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from envlab.cli.measure_cmds import report_cmd
from envlab.core import ConfigError, EpisodeError, NotFoundError, Status, StepRecord
from envlab.measure import load_run
from envlab.report import render_report, write_report
from envlab.runs import TrajectoryStore
from tests.measure.runs import make_run
from tests.report.helpers import shell_episode, write_run

app = typer.Typer()
app.command("report")(report_cmd)
app.command("noop")(lambda: None)  # two commands, so typer keeps the command name


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    root = tmp_path_factory.mktemp("runs")
    return [
        make_run(root / "calc-random", "calc", "random", tasks=30, samples=3),
        make_run(root / "calc-oracle", "calc", "oracle", tasks=30, samples=3),
    ]


@pytest.fixture(scope="module")
def report(runs: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    write_report(runs, out)
    return out


def open_page(browser: Any, path: Path) -> tuple[Any, list[str], list[str]]:
    """The report in a fresh page that may not touch the network; returns (page, urls, errors)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    urls: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: urls.append(r.url))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.route(re.compile(r"^(?!file:).*"), lambda route: route.abort())
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=30_000)
    return page, urls, errors


def test_the_file_is_self_contained(report: Path) -> None:
    text = report.read_text()
    assert text.startswith("<!doctype html>")
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", text)
    assert "@import" not in text and "url(http" not in text
    assert text.count("<script type='application/x-ndjson'") == 2


def test_report_of_a_real_run_in_chromium(browser: Any, report: Path, runs: list[Path]) -> None:
    page, urls, errors = open_page(browser, report)
    shot = report.with_suffix(".png")
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 30_000
    assert all(u.startswith("file:") for u in urls), urls
    assert not errors, errors

    # the summary shows intervals; the charts are drawn
    summary = page.inner_text("#summary-table")
    assert "calc-random" in summary and " to " in summary
    assert page.locator("#chart-mean svg rect.bar").count() == 2
    assert page.locator("#chart-mean svg path.whisker").count() == 2
    assert page.locator("#chart-passk svg polyline.line").count() == 4  # pass@k, pass^k x 2
    assert page.locator("#chart-passk svg circle").count() == 12  # k = 1..3
    assert page.locator("#chart-rewards svg rect.bar").count() == 20
    assert page.locator("#chart-status svg rect.bar").count() >= 2
    assert "B is better by" in page.inner_text("#compare-table")
    drawn = int(page.get_attribute("#heatmap-canvas", "data-drawn") or 0)
    assert drawn == 2 * min(30, (380 - 22) // 16 + 1)
    pixel = page.evaluate(
        "(() => { const c = document.getElementById('heatmap-canvas');"
        " const d = window.devicePixelRatio || 1;"
        " return Array.from(c.getContext('2d').getImageData(310 * d, 30 * d, 1, 1).data); })()"
    )
    assert pixel[:3] != [255, 255, 255] and pixel[0] > pixel[1]  # a red cell: random fails
    assert "scripted:random" in page.inner_text("#agents")

    # pick a task and a sample, then step through the episode
    traj = next(
        t for t in TrajectoryStore(runs[0] / "trajectories.jsonl").load()
        if t.task_id == "calc-test-0-00002" and t.sample_index == 1
    )  # fmt: skip
    page.click("#task-list .item[data-task='calc-test-0-00002']")
    page.click("#viewer-samples button.sample[data-sample='1']")
    assert traj.episode_id in page.inner_text("#episode")
    n = traj.n_steps
    assert page.inner_text("#step-pos") == f"step 1 / {n}"
    assert page.locator("#steps .step").count() == 1
    if n > 1:
        page.click("#step-next")
        assert page.inner_text("#step-pos") == f"step 2 / {n}"
        assert page.get_attribute("#steps .step", "data-step") == "1"
    page.click("#step-all")
    assert page.locator("#steps .step").count() == n
    steps_text = page.inner_text("#steps")
    for m in traj.messages[traj.steps[0].message_index :]:
        for call in m.get("tool_calls", []):
            assert call["function"]["name"] in steps_text
        if m["role"] == "tool":
            assert m["content"] in steps_text
    assert "correct" in page.inner_text("#episode .episode-head")  # reward components
    page.locator("#viewer").screenshot(path=str(report.with_name("viewer.png")))
    page.close()


def test_a_heatmap_cell_opens_its_episodes(browser: Any, report: Path) -> None:
    page, _, _ = open_page(browser, report)
    width = page.evaluate("document.getElementById('heatmap-wrap').clientWidth - 2")
    cw = max(24, min(90, (width - 300 - 8) / 2))
    page.click("#heatmap-canvas", position={"x": 300 + cw * 1.5, "y": 22 + 16 * 3 + 8})
    assert page.input_value("#viewer-run") == "1"
    assert "calc-test-0-00003" in page.inner_text("#viewer-samples")
    assert page.locator("#viewer-samples button.sample").count() == 3
    assert page.inner_text("#episode .badge") == "ok"
    page.close()


def test_sandbox_commands_and_hostile_text(browser: Any, tmp_path: Path) -> None:
    hostile = "</script><b id='injected'>not bold</b> " + "x" * 300
    run = write_run(
        tmp_path / "shell",
        [
            shell_episode("t-1", note=hostile),
            shell_episode("t-2"),
            shell_episode("t-3", reward=None),
            shell_episode("t-4", output="exit code: 2\nstderr:\nls: cannot access 'x'"),
        ],
    )
    out = tmp_path / "r.html"
    write_report([run], out, max_chars=200)
    page, _, errors = open_page(browser, out)
    assert not errors, errors
    page.click("#task-list .item[data-task='t-1']")
    page.click("#step-all")
    shell = page.inner_text("#steps")
    assert "$ ls -la /work" in shell and "a.txt\nb.txt" in shell and "[exit 0]" in shell
    assert page.locator("#steps pre.shell").count() == 2
    assert '"cwd": "/work"' in shell  # the sandbox info of the step
    prompt = page.inner_text("#episode")
    assert "</script><b id='injected'>not bold</b>" in prompt
    assert "more characters cut from the report" in prompt
    assert page.locator("#injected").count() == 0
    page.click("#task-list .item[data-task='t-4']")  # a task folder's run tool: plain text
    assert "exit code: 2" in page.inner_text("#steps pre.shell >> nth=1")
    assert "files_listed" in page.inner_text("#episode .episode-head")
    assert page.inner_text("#status-table").count("1") >= 1  # the infra error is counted
    page.close()


def test_a_failed_grade_shows_why_and_the_verifier_output(browser: Any, tmp_path: Path) -> None:
    failed = shell_episode("t-1", reward=0.0)
    failed.grader_failed = "tests/test.sh was killed by signal 9"
    failed.info = {"grade": {"verifier_exit_code": 137, "verifier_output_tail": "FAILED x"}}
    run = write_run(tmp_path / "g", [failed, shell_episode("t-2")])
    out = tmp_path / "r.html"
    write_report([run], out)
    page, _, errors = open_page(browser, out)
    assert not errors, errors
    assert "grader failed" in page.inner_text("#summary")
    page.click("#task-list .item[data-task='t-1']")
    head = page.inner_text("#episode .episode-head")
    assert "killed by signal 9" in head and "test.sh exit code 137" in head and "FAILED x" in head
    page.close()


def test_errors_show_kind_phase_and_headline(browser: Any, tmp_path: Path) -> None:
    crashed = shell_episode("t-1", reward=0.0)
    crashed.status = Status.AGENT_ERROR
    crashed.error = EpisodeError(
        kind="agent", phase="act", message="ValueError: no answer\n  File 'agent.py', line 3"
    )
    infra = shell_episode("t-2", reward=None)
    infra.error = EpisodeError(kind="infra", phase="reset", message="the sandbox did not start")
    limit = shell_episode("t-3")  # the harness acted at a limit: a step without a model turn
    limit.steps.append(StepRecord(index=2, message_index=None))
    limit.n_steps = 3
    run = write_run(tmp_path / "e", [crashed, infra, limit])
    out = tmp_path / "r.html"
    write_report([run], out)
    page, _, errors = open_page(browser, out)
    assert not errors, errors
    table = page.inner_text("#errors-table")
    assert "agent in act: ValueError: no answer" in table
    assert "infra in reset: the sandbox did not start" in table
    page.click("#task-list .item[data-task='t-1']")
    assert "agent in act: ValueError: no answer" in page.inner_text("#episode .episode-error b")
    assert "File 'agent.py', line 3" in page.inner_text("#episode .episode-error pre")
    page.click("#task-list .item[data-task='t-3']")
    page.click("#step-all")
    assert page.locator("#steps .step").count() == 3
    assert "no model turn" in page.inner_text("#steps .step >> nth=2")
    assert "The files are a.txt" in page.inner_text("#steps .step >> nth=1")
    page.close()


def test_a_legacy_string_error_still_reports(tmp_path: Path) -> None:
    run = write_run(tmp_path / "old", [shell_episode("t-1")])
    path = run / "trajectories.jsonl"
    line = json.loads(path.read_text())
    line["status"], line["error"] = "agent_error", "engine: the agent crashed"
    path.write_text(json.dumps(line) + "\n")
    html = render_report([load_run(run, trajectories=True)])
    assert "unknown in unknown: engine: the agent crashed" in html


def test_strings_repeated_across_episodes_are_stored_once(tmp_path: Path) -> None:
    run = write_run(tmp_path / "shell", [shell_episode(f"t-{i}") for i in range(50)])
    html = render_report([load_run(run, trajectories=True)])
    assert html.count("You are in a sandbox. " * 10) == 1  # once, not 50 times
    with pytest.raises(ConfigError, match="trajectories=True"):
        render_report([load_run(run)])


def test_large_run_stays_responsive(browser: Any, tmp_path: Path) -> None:
    """10,000 episodes: the page draws a page of tasks and what is scrolled into view, never all
    at once (how fast is bench material, not an assertion here)."""
    run = make_run(tmp_path / "big", "calc", "random", tasks=2500, samples=4)
    out = tmp_path / "big.html"
    info = write_report([run], out)
    assert info.episodes == 10_000 and info.bytes < 40e6
    page, _, errors = open_page(browser, out)
    assert not errors
    assert page.evaluate("window.envlabReport.renderMs") is not None
    assert page.locator("#task-list .item").count() == 300  # the list draws a page, not 2,500
    page.fill("#viewer-filter", "02499")
    page.click("#task-list .item[data-task='calc-test-0-02499']")
    page.click("#viewer-samples button.sample[data-sample='3']")
    assert "calc-test-0-02499" in page.inner_text("#episode")
    page.evaluate("document.getElementById('heatmap-wrap').scrollTop = 1e9")
    page.wait_for_timeout(100)
    assert int(page.get_attribute("#heatmap-canvas", "data-drawn") or 0) > 10
    page.close()


def test_cli_report(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "cli.html"
    r = CliRunner().invoke(app, ["report", *map(str, runs), "--out", str(out), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["episodes"] == 180 and data["tasks"] == 30 and out.stat().st_size == data["bytes"]
    r = CliRunner().invoke(app, ["report", str(runs[0]), "--out", str(tmp_path)])
    assert isinstance(r.exception, ConfigError) and "is a directory" in str(r.exception)
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nope"), "--out", str(out)])
    assert isinstance(r.exception, NotFoundError)
