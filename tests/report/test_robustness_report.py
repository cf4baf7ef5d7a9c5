"""A report of the runs of ``envlab robustness`` shows its section once: the table of drops,
the verdicts, and a chart per perturbation (the PNGs the command drew, inlined)."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

from envlab.report import write_report
from envlab.report.robustness import NO_MATPLOTLIB, read_robustness
from tests.conftest import subprocess_env

MEASURE = ["robustness", "tau-retail", "--agent", "oracle", "--perturb",
           "transient=0.3,stale=0.3", "--tasks", "5", "--json"]  # fmt: skip


def run(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = f"{prelude}\nfrom envlab.cli.main import main\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True,
        env=subprocess_env(), timeout=300,
    )  # fmt: skip


def images(page: str) -> dict[str, bytes]:
    found = re.findall(r"<img alt='([^']*)' src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    return {alt: base64.b64decode(data) for alt, data in found}


def test_the_report_has_the_section_and_a_chart_per_perturbation(tmp_path: Path) -> None:
    out = tmp_path / "rb"
    r = run(*MEASURE, "--out", str(out))
    assert r.returncode == 0, r.stderr
    result = read_robustness(out)
    assert result is not None and [p.name for p in result.perturbations] == ["transient", "stale"]
    write_report([out / "clean", out / "transient", out / "stale"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert page.count("<section class='robustness'>") == 1
    imgs = images(page)
    for p in result.perturbations:
        assert (
            p.chart is not None
            and imgs[f"robustness: {p.perturbation}"] == (out / p.chart).read_bytes()
        )
        assert p.verdict and p.verdict.replace("'", "&#x27;") in page
    assert result.chart is not None
    assert imgs["robustness: the drop of every perturbation"] == (out / result.chart).read_bytes()
    assert "<td>stale=0.3</td>" in page and "<td>transient=0.3</td>" in page
    # one of the runs is enough to find the measurement it belongs to
    write_report([out / "stale"], tmp_path / "one.html")
    assert (tmp_path / "one.html").read_text().count("<section class='robustness'>") == 1


def test_a_run_of_no_robustness_measurement_has_no_section(tmp_path: Path) -> None:
    r = run("eval", "calc", "--agent", "oracle", "--tasks", "3", "--out", str(tmp_path / "e"))
    assert r.returncode == 0, r.stderr
    write_report([tmp_path / "e"], tmp_path / "r.html")
    assert "class='robustness'" not in (tmp_path / "r.html").read_text()


def test_without_matplotlib_the_numbers_are_kept_and_the_missing_charts_explained(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rb"
    # matplotlib cannot be imported in this process (as when the train extra is not installed)
    r = run(*MEASURE, "--out", str(out), prelude="import sys; sys.modules['matplotlib'] = None")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert NO_MATPLOTLIB in res["notes"] and res["chart"] is None
    assert all(p["chart"] is None and p["drop"] is not None for p in res["perturbations"])
    assert not (out / "charts").exists()
    write_report([out / "clean", out / "stale"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "class='robustness'" in page and "matplotlib is not installed" in page
    assert not any(alt.startswith("robustness") for alt in images(page))
