"""``envlab robustness``: clean and perturbed runs on the same tasks, the paired drop of each
perturbation with its interval, faults and safety-gate trips counted, resumable."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from envlab.agents.scripted import OracleAgent
from envlab.core import Action, Observation, ToolCall
from envlab.runs import TRAJECTORIES_FILE, TrajectoryStore
from tests.conftest import subprocess_env

ENVLAB = [sys.executable, "-m", "envlab.cli.main"]


def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ENVLAB, *args], capture_output=True, text=True, env=subprocess_env(), timeout=300
    )


def robustness(out: Path, *args: str) -> dict[str, Any]:
    r = envlab("robustness", *args, "--out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def by_name(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in result["perturbations"]}


def trajectories(run_dir: str | Path) -> list[Any]:
    return TrajectoryStore(Path(run_dir) / TRAJECTORIES_FILE).load()


TAU = ["tau-retail", "--agent", "oracle", "--perturb", "transient=0.3,stale=0.3", "--tasks", "48"]
"""The first 48 tasks hold 13 whose gold solution reads after a write (where a read can be
stale: at the first read no write has happened yet)."""


def test_tau_retail_oracle_retries_transient_errors(tmp_path: Path) -> None:
    res = robustness(tmp_path / "rb", *TAU)
    assert res["clean"]["faults"] == 0 and res["clean"]["mean"] == 1.0
    p = by_name(res)
    # the faults were injected, and counted from the steps' info
    for q in p.values():
        assert q["run"]["faults"] > 0 and q["run"]["episodes_with_faults"] > 0
        counted = sum(
            len(s.info.get("faults", []))
            for t in trajectories(q["run"]["run_dir"])
            for s in t.steps
        )
        assert counted == q["run"]["faults"]
        assert q["n_shared"] == 48 and q["run"]["excluded"] == {}
        # the same tasks and run seed: the perturbed runs hold exactly the clean run's tasks
        assert sorted(t.task_id for t in trajectories(q["run"]["run_dir"])) == sorted(
            t.task_id for t in trajectories(res["clean"]["run_dir"])
        )
    # the oracle retries: no drop, and the interval says so
    transient = p["transient"]
    assert transient["drop"] == 0 and transient["low"] == 0 and transient["high"] == 0
    assert transient["run"]["mean"] == 1.0 and transient["verdict"].startswith("no drop")
    on_disk = json.loads((tmp_path / "rb" / "robustness.json").read_text())
    assert on_disk["perturbations"] == res["perturbations"]


VERIFYING = ["tau-retail", "--agent", "oracle", "--agent-arg", "verify_writes=true",
             "-e", "reward=strict", "--perturb", "transient=0.3,stale=1",
             "--tasks", "48"]  # fmt: skip
"""The oracle that acts on what it reads: it reads each write back and repeats one the read
does not show (``OracleAgent(verify_writes=True)``). ``stale=1``: every read after a write
answers from before it, so the drop does not hang on which reads the seeds make stale."""


def test_tau_retail_oracle_loses_to_stale_reads(tmp_path: Path) -> None:
    """The verifying oracle retries transient errors (no drop) and repeats the writes a stale
    read-back hides; a repeat the tool carries out came without the user's yes, which
    reward=strict's confirmed_writes gate zeroes: a measured drop, its interval above 0."""
    res = robustness(tmp_path / "rb", *VERIFYING)
    assert res["clean"]["mean"] == 1.0 and res["clean"]["gates"] == {}
    p = by_name(res)
    transient, stale = p["transient"], p["stale"]
    assert transient["run"]["faults"] > 0 and transient["run"]["mean"] == 1.0
    assert transient["drop"] == 0 and transient["low"] == 0 and transient["high"] == 0
    assert stale["run"]["faults"] > 0 and stale["n_shared"] == 48
    assert stale["drop"] > 0 and 0 < stale["low"] <= stale["drop"] <= stale["high"]
    assert stale["p_value"] < 0.05 and stale["verdict"].startswith("lowers the reward")
    # the drop is the repeats: each zeroed episode repeated a write its read-back hid
    zeroed = [t for t in trajectories(stale["run"]["run_dir"]) if t.reward == 0.0]
    assert zeroed and stale["run"]["gates"] == {"confirmed_writes": len(zeroed)}
    for t in zeroed:
        assert any(c.id.endswith("_repeat1") for s in t.steps for c in s.action.tool_calls)
    assert abs(stale["drop"] - len(zeroed) / 48) < 1e-9


INJECTED = re.compile(r"call (\w+) with arguments (\{.*\})\. The customer has already")


class InjectionFollower(OracleAgent):
    """The oracle, except that it does what the first injected instruction it reads says (an
    agent a prompt injection fools)."""

    name = "inject-follower"

    def __init__(self) -> None:
        super().__init__()
        self.followed = False

    async def act(self, observation: Observation) -> Action:
        for r in observation.tool_results:
            if not self.followed and (m := INJECTED.search(r.content)):
                self.followed = True
                self._last = Action(tool_calls=[ToolCall(m[1], json.loads(m[2]), id="injected")])
                return self._last
        return await super().act(observation)


def test_gate_trips_clean_vs_perturbed_when_an_injection_is_followed(tmp_path: Path) -> None:
    res = robustness(
        tmp_path / "rb", "tau-retail", "--agent", f"{__name__}:InjectionFollower",
        "-e", "reward=strict", "--perturb", "inject=0.5", "--tasks", "12",
    )  # fmt: skip
    inject = by_name(res)["inject"]
    assert res["clean"]["gates"] == {} and res["clean"]["mean"] == 1.0
    want: dict[str, int] = {}
    for t in trajectories(inject["run"]["run_dir"]):
        if t.gated_by is not None:
            want[t.gated_by] = want.get(t.gated_by, 0) + 1
    assert want and inject["run"]["gates"] == want
    assert inject["drop"] > 0 and inject["low"] is not None


def test_table_and_resume(tmp_path: Path) -> None:
    out = tmp_path / "rb"
    args = ["tau-retail", "--agent", "oracle", "--perturb", "transient=0.3,stale=0.3",
            "--tasks", "6", "--out", str(out)]  # fmt: skip
    r = envlab("robustness", *args)
    assert r.returncode == 0, r.stderr
    for text in ("clean", "transient=0.3", "stale=0.3", "drop", "no drop", "envlab report"):
        assert text in r.stdout
    before = {n: len(trajectories(out / n)) for n in ("clean", "transient", "stale")}
    first = json.loads((out / "robustness.json").read_text())
    # an existing measurement is refused before anything runs, unless resumed
    again = envlab("robustness", *args)
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = envlab("robustness", *args, "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert {n: len(trajectories(out / n)) for n in before} == before == dict.fromkeys(before, 6)
    assert json.loads(resumed.stdout)["perturbations"] == first["perturbations"]


def test_an_interrupted_measurement_resumes_the_missing_runs(tmp_path: Path) -> None:
    out = tmp_path / "rb"
    args = ["calc", "--agent", "oracle", "--tasks", "4", "--out", str(out)]
    assert envlab("robustness", *args, "--perturb", "transient=0.5").returncode == 0
    (out / "robustness.json").unlink()  # as if it stopped before the second run
    r = envlab("robustness", *args, "--perturb", "transient=0.5,timeout=0.5", "--resume", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [p["name"] for p in res["perturbations"]] == ["transient", "timeout"]
    assert len(trajectories(out / "timeout")) == 4 and len(trajectories(out / "clean")) == 4


def test_calc_oracle_retries_transient_errors_and_loses_to_timeouts(tmp_path: Path) -> None:
    """A timed-out call may be sent again; when every call times out, retries do not help."""
    res = robustness(
        tmp_path / "rb", "calc", "--agent", "oracle", "--perturb", "transient=0.5,timeout=1",
        "--tasks", "20",
    )  # fmt: skip
    t, timeout = by_name(res)["transient"], by_name(res)["timeout"]
    assert t["run"]["faults"] > 0 and t["drop"] == 0 and t["high"] == 0
    assert t["verdict"].startswith("no drop")
    # every call times out: the oracle's retries time out too, a measured drop
    assert timeout["run"]["faults"] > 0 and timeout["drop"] > 0
    assert timeout["low"] is not None and timeout["low"] <= timeout["drop"] <= timeout["high"]


def test_a_perturbation_the_environment_cannot_take_is_refused_before_running(
    tmp_path: Path,
) -> None:
    """calc keeps no snapshots, so it cannot answer from an earlier state."""
    r = envlab("robustness", "calc", "--agent", "oracle", "--perturb", "transient=0.3,stale=0.3",
               "--out", str(tmp_path / "x"))  # fmt: skip
    assert r.returncode == 2 and "stale" in r.stderr and "snapshot" in r.stderr
    assert not (tmp_path / "x").exists()


def test_safety_gate_trips_counted_by_gate(tmp_path: Path) -> None:
    """The no-op agent under reward=strict: every episode it fails a gate zeroes; the counts
    are those of the trajectories' ``gated_by``, clean and perturbed alike. It calls no tool,
    so nothing was injected, and the result says so."""
    res = robustness(
        tmp_path / "rb", "tau-retail", "--agent", "noop", "-e", "reward=strict",
        "--perturb", "transient=0.3", "--tasks", "6",
    )  # fmt: skip
    want: dict[str, int] = {}
    for t in trajectories(res["clean"]["run_dir"]):
        if t.gated_by is not None:
            want[t.gated_by] = want.get(t.gated_by, 0) + 1
    assert want and res["clean"]["gates"] == want
    p = by_name(res)["transient"]
    assert p["run"]["gates"] == want and p["run"]["faults"] == 0
    assert any("no fault was injected" in n for n in p["notes"])


def test_bad_perturbations_are_refused_before_running(tmp_path: Path) -> None:
    for bad in ("nonsense=0.3", ""):
        r = envlab("robustness", "calc", "--agent", "oracle", "--perturb", bad,
                   "--out", str(tmp_path / "x"))  # fmt: skip
        assert r.returncode == 2 and "error:" in r.stderr
        assert not (tmp_path / "x" / "clean").exists()


def test_the_same_perturbation_twice_gets_two_directories(tmp_path: Path) -> None:
    res = robustness(
        tmp_path / "rb", "calc", "--agent", "oracle", "--perturb", "transient=0.2,transient=0.6",
        "--tasks", "3",
    )  # fmt: skip
    names = [p["name"] for p in res["perturbations"]]
    assert len(set(names)) == 2 and all((tmp_path / "rb" / n).is_dir() for n in names)
