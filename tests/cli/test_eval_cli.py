from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=120
    )


def test_oracle_scores_one_noop_zero(tmp_path: Path) -> None:
    for agent, want in (("oracle", 1.0), ("noop", 0.0)):
        r = envlab(
            "eval", "arith", "--agent", agent, "--tasks", "50", "--samples", "4",
            "--out", str(tmp_path / agent), "--json",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        s = json.loads(r.stdout)
        assert s["pass_at_k"]["1"] == want and s["n_episodes"] == 200
        on_disk = json.loads((tmp_path / agent / "summary.json").read_text())
        assert on_disk["pass_at_k"]["1"] == want
        run = json.loads((tmp_path / agent / "run.json").read_text())
        assert run["command"][:3] == ["envlab", "eval", "arith"]
        assert run["env_hash"] and run["agent"]["name"] == agent


def test_table_output(tmp_path: Path) -> None:
    r = envlab("eval", "calc", "--agent", "oracle", "--tasks", "5", "--out", str(tmp_path / "r"))
    assert r.returncode == 0, r.stderr
    assert "pass@1" in r.stdout and "1.000" in r.stdout


def test_unknown_names_list_the_known_ones(tmp_path: Path) -> None:
    r = envlab("eval", "nope", "--agent", "oracle", "--out", str(tmp_path / "x"))
    known = "Known environments: arith, calc, tau-airline, tau-retail, triage"
    assert r.returncode == 2 and known in r.stderr
    r = envlab("eval", "arith", "--agent", "nope", "--out", str(tmp_path / "y"))
    assert (
        r.returncode == 2
        and "Known agents: decision, noop, openai, oracle, random, shell, smollm2" in r.stderr
    )


def test_envs_lists_json() -> None:
    r = envlab("envs", "--json")
    names = {row["name"] for row in json.loads(r.stdout)}
    assert {"arith", "calc"} <= names


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_at_the_url_exits_nonzero_with_the_reason(tmp_path: Path) -> None:
    port = _free_port()  # closed again: nothing listens there
    r = envlab("eval", "calc", "--agent", f"openai:m@http://127.0.0.1:{port}/v1", "--tasks", "2",
               "--out", str(tmp_path / "r"))  # fmt: skip
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "the model endpoint failed in all 2 episodes" in r.stderr
    assert "agent_error (2)" in r.stdout
    assert f"127.0.0.1:{port}" in r.stdout  # the first error, under the table
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    # the agent's endpoint is the agent's: scored 0, never excluded
    assert summary["n_scored"] == 2 and summary["n_model_failed"] == 2
    assert summary["mean_reward"] == 0.0


def test_table_rows_carry_their_intervals_counts_and_components(tmp_path: Path) -> None:
    r = envlab("eval", "calc", "--agent", "oracle", "--tasks", "5", "--samples", "2",
               "--out", str(tmp_path / "r"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in r.stdout.splitlines() if line.count("│") == 3}  # fmt: skip
    assert re.fullmatch(r"1\.000 \(95% CI 0\.\d{3}-1\.000\)", rows["mean reward"]), rows
    assert rows["pass@2"].startswith("1.000 (95% CI ")
    assert rows["episodes (ok, scored)"] == "10 (10 ok, 10 scored)"
    assert rows["component correct (mean)"] == "1.000"
    assert f"envlab report {tmp_path / 'r'}" in r.stdout


def test_user_limits_go_over_the_environments(tmp_path: Path) -> None:
    r = envlab("eval", "calc", "--agent", "oracle", "--tasks", "3", "--max-steps", "1",
               "--out", str(tmp_path / "r"), "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status_counts"]["truncated"] == 3  # the oracle needs more steps
    run = json.loads((tmp_path / "r" / "run.json").read_text())
    assert "max_steps" in json.dumps(run["episode_config"])


def test_version_and_flags_without_a_type() -> None:
    from envlab import __version__

    r = envlab("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"envlab {__version__}"
    for command in (["eval"], ["vet"], ["task", "run"], ["task", "check"], ["compare"], ["gc"]):
        text = envlab(*command, "--help").stdout
        assert "--json" in text and "<bool>" not in text, (command, text)


def test_help_loads_nothing_heavy() -> None:
    code = ("import sys\nsys.argv = ['envlab', '--help']\nfrom envlab.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "import json; print(json.dumps(sorted(sys.modules)))")  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=subprocess_env(), timeout=120, check=True)  # fmt: skip
    modules = json.loads(r.stdout.splitlines()[-1])
    heavy = ("scipy", "numpy", "rich", "pydantic", "asyncio", "envlab.rollout", "envlab.core")
    assert [m for m in modules if m.split(".")[0] in heavy or m.startswith(heavy)] == []


def test_a_missing_file_says_where_it_looked(tmp_path: Path) -> None:
    argv = [*ENVLAB, "eval", "nothere.py:Env", "--agent", "oracle"]
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=subprocess_env(),
                       timeout=120)  # fmt: skip
    assert r.returncode == 2 and "nothere.py" in r.stderr and "Traceback" not in r.stderr


def test_fail_under_and_strict_exit_1_for_ci(tmp_path: Path) -> None:
    """eval exits 1 when the mean is below --fail-under; vet --strict when a task is not ok."""
    ok = envlab("eval", "calc", "--agent", "oracle", "--tasks", "2", "--fail-under", "1",
                "--out", str(tmp_path / "a"))  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    low = envlab("eval", "calc", "--agent", "oracle", "--tasks", "2", "--max-steps", "1",
                 "--fail-under", "0.5", "--out", str(tmp_path / "b"))  # fmt: skip
    assert low.returncode == 1 and "below --fail-under 0.5" in low.stderr
    flawed = "tests.vet.python_gallery.flawed:DuplicateTasksEnv"
    args = ["--agent", "none", "--samples", "2", "--oracle-runs", "1", "--json"]
    loose = envlab("vet", flawed, *args, "--out", str(tmp_path / "v1"))
    assert loose.returncode == 0, loose.stderr
    assert json.loads(loose.stdout)["verdict_counts"]["broken"] > 0
    strict = envlab("vet", flawed, *args, "--strict", "--out", str(tmp_path / "v2"))
    assert strict.returncode == 1 and "--strict: broken" in strict.stderr
    clean = envlab("vet", "calc", *args, "--tasks", "3", "--strict", "--out", str(tmp_path / "v3"))
    assert clean.returncode == 0, clean.stderr


def test_episodes_that_time_out_on_a_model_endpoint_say_where_the_time_went(
    tmp_path: Path,
) -> None:
    """A served model too slow for the step limit (the quick tour's `serve-model` on a busy
    machine): every episode times out, scored 0 as the agent's, and the output says why and
    what to change (fewer at once, a longer step limit, a faster engine)."""
    import threading

    from tests.models.fake_openai import FakeOpenAI, Scripted, error

    release = threading.Event()

    def respond(body: dict[str, object]) -> Scripted:
        release.wait(30)
        return error(503, "released")

    with FakeOpenAI(respond=respond) as fake:
        try:
            r = envlab(
                "eval", "calc", "--agent", f"openai:m@{fake.base_url}", "--tasks", "2",
                "--step-timeout", "0.5", "--concurrency", "2", "--out", str(tmp_path / "r"),
            )  # fmt: skip
        finally:
            release.set()
    assert "timeout (2)" in r.stdout, r.stdout + r.stderr
    hint = " ".join(r.stdout.split())
    assert "2 of 2 episodes ran out of time waiting on the model at" in hint, hint
    assert "--concurrency 1" in hint and "--step-timeout" in hint
    assert "pip install -e '.[local]'" in hint  # printed as written, not read as markup
