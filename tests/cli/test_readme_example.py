"""The README's "Writing an environment" example, exactly as written, run as a new user would.

The code block is saved where the README says, in an empty working directory, and the README's
own commands run there with the installed ``envlab`` script (whose ``sys.path`` does not hold
the working directory: the import of ``mypkg`` from it is what is tested).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import subprocess_env

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## Writing an environment"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else None]


def _example() -> tuple[str, str, list[str], list[str]]:
    """The file to save, its code, the commands of the bash block, the commands quoted inline."""
    section = _section()
    saved_as = re.search(r"Save this as `([^`]+)`", section)
    code = re.search(r"```python\n(.*?)```", section, re.S)
    bash = re.search(r"```bash\n(.*?)```", section, re.S)
    assert saved_as and code and bash, "the README's environment example lost its shape"
    commands = [line.split("#")[0].strip() for line in bash.group(1).splitlines()]
    inline = re.findall(r"`(envlab eval [^`]+)`", section)
    return saved_as.group(1), code.group(1), [c for c in commands if c], inline


def _envlab() -> str:
    script = Path(sys.executable).parent / "envlab"
    found = str(script) if script.exists() else shutil.which("envlab")
    if found is None:
        pytest.skip("the envlab script is not installed (pip install -e .)")
    return found


def _run(cwd: Path, command: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)
    assert argv[0] == "envlab", command
    env = subprocess_env()
    env.pop("PYTHONPATH")  # a new user has none: nothing but the working directory finds mypkg
    return subprocess.run([_envlab(), *argv[1:]], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=180)  # fmt: skip


def _summary(cwd: Path, agent: str) -> dict:
    [path] = (cwd / "runs").glob(f"*-{agent}-*/summary.json")
    return json.loads(path.read_text())


def test_the_readme_environment_runs_as_written(tmp_path: Path) -> None:
    saved_as, code, commands, _ = _example()
    (tmp_path / saved_as).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / saved_as).write_text(code)
    oracle = next(c for c in commands if "--agent oracle" in c)
    for command in [*commands, oracle.replace("--agent oracle", "--agent noop")]:
        r = _run(tmp_path, command)
        assert r.returncode == 0, (command, r.stdout, r.stderr)
    got = _summary(tmp_path, "oracle")
    assert got["pass_at_k"]["1"] == 1.0 and got["n_scored"] == got["n_episodes"] > 0
    assert _summary(tmp_path, "noop")["pass_at_k"]["1"] == 0.0
    random = _summary(tmp_path, "random")
    assert random["n_scored"] == random["n_episodes"] > 0  # the other command ran for real


def test_the_readme_file_form_runs_too(tmp_path: Path) -> None:
    saved_as, code, _, inline = _example()
    (tmp_path / saved_as).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / saved_as).write_text(code)
    [file_form] = [c for c in inline if ".py:" in c]
    r = _run(tmp_path, f"{file_form} --agent oracle --json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["pass_at_k"]["1"] == 1.0
