"""What the code-under-test probes target, and the probes' scripts as bash reads them."""

from __future__ import annotations

import subprocess

from envlab.vet.hacks import (
    breaker_probes,
    deleted_workdir_probe,
    git_probe,
    imported_modules,
    module_probes,
    runs_git,
)
from envlab.vet.informed import OracleView, answer_link_probes, tampered_input_probes

TESTS = """import sys, json
sys.path.append("/app")
from intervals import merge
import textstats.core
import pytest
"""


def test_the_code_under_test_is_what_the_tests_import_beyond_the_stdlib() -> None:
    assert imported_modules(TESTS) == ["intervals", "textstats"]
    assert runs_git("cd /app && git status") and not runs_git("digit = 1; .gitignore")


def test_every_probe_script_is_valid_bash(tmp_path) -> None:  # type: ignore[no-untyped-def]
    view = OracleView(before=tmp_path, after=tmp_path, created=["/app/out.json"],
                      inputs=["/app/data.csv"], tests=["expected.json", "test.sh"])  # fmt: skip
    probes = [
        *module_probes(TESTS),
        git_probe({"/app/out.json": "WzFd"}),
        deleted_workdir_probe(),
        *breaker_probes(["/app/out.json"], json_hint=True),
        *answer_link_probes(view, "Write `/app/out.json`.", "cp x /app/.grader/expected.json"),
        *tampered_input_probes(view),
    ]
    names = {p.name for p in probes}
    assert {"answer_link_expected.json", "answer_link_app_.grader_expected.json"} <= names
    assert {"tampered_inputs_first", "break_deep_json", "module_patches_pytest"} <= names
    for p in probes:
        for script in (p.script, p.after_oracle or "true"):
            out = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
            assert out.returncode == 0, (p.name, out.stderr)
