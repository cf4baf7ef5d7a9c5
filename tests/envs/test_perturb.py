"""Perturbations on ``calc`` (and any ``ToolEnv``): parsing, hashing, seeded and recorded faults,
what each fault does to a call, the retrying oracle, composition, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlab.agents.scripted import OracleAgent
from envlab.core import (
    Action,
    ConfigError,
    Environment,
    EnvSpec,
    Observation,
    StepResult,
    Task,
    TaskSet,
    ToolCall,
    ToolEnv,
    Trajectory,
)
from envlab.core.toolenv import TRUNCATED_MARK
from envlab.envs import load_env
from envlab.envs.calc import CalcEnv
from envlab.envs.perturb import (
    PERTURBATIONS,
    RETRYABLE_MARK,
    Perturbed,
    parse_perturbations,
    perturb,
)
from tests.conftest import subprocess_env
from tests.envs.taskfolder.conftest import EXAMPLES
from tests.sandbox.conftest import requires_bwrap
from tests.support.play import hash_in_subprocess, play

KEYS = {"fault", "step", "tool", "call_id"}
ON_CALC = {
    "timeout": "timeout=0.5",
    "transient": "transient=0.5",
    "latency": "latency=0.0001:0.0005",
    "rate_limit": "rate_limit=1/2",
    "truncate": "truncate=0.5",
    "malformed": "malformed=0.5",
    "inject": "inject=0.5",
}
"""Every perturbation but ``stale`` (calc has no state to be stale: refused, tested below)."""


def faults_of(tr: Trajectory) -> list[dict[str, Any]]:
    return [f for s in tr.steps for f in s.info.get("faults", [])]


async def oracle_runs(spec: EnvSpec, n: int, run_seed: int = 0) -> list[Trajectory]:
    return [await play(spec, OracleAgent(), t, run_seed=run_seed) for t in spec.tasks(n=n)]


# --- parsing -------------------------------------------------------------------------------
def test_every_perturbation_parses_and_describes_itself_canonically() -> None:
    text = (
        "timeout=0.1:2,transient=0.3:2,latency=0.05,rate_limit=3/5,stale=0.2:1,"
        "truncate=0.5:0.25,malformed=0.1,inject=1"
    )
    ps = parse_perturbations(text)
    assert [p.name for p in ps] == list(PERTURBATIONS)
    assert [p.describe() for p in ps] == [
        "timeout=0.1:2",
        "transient=0.3:2",
        "latency=0.05",
        "rate_limit=3/5",
        "stale=0.2",  # the default lag is left out: one text per perturbation
        "truncate=0.5:0.25",
        "malformed=0.1",
        "inject=1",
    ]
    assert parse_perturbations([p.describe() for p in ps]) == ps
    assert parse_perturbations("latency=0.01:0.02")[0].describe() == "latency=0.01:0.02"
    assert parse_perturbations("rate_limit=2")[0].describe() == "rate_limit=2"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("foo=1", "unknown perturbation 'foo'"),
        ("timeout", "timeout needs a value"),
        ("timeout=2", "probability in [0, 1]"),
        ("timeout=abc", "bad perturbation 'timeout=abc'"),
        ("latency=-1", "latency's MEAN_S must be a finite number > 0"),
        ("latency=0.2:0.1", "LOW_S <= HIGH_S"),
        ("rate_limit=0/2", "rate_limit's N must be a whole number >= 1"),
        ("rate_limit=2/x", "WINDOW_STEPS"),
        ("stale=0.2:0", "stale's K_WRITES"),
        ("truncate=0.5:1", "below 1"),
        ("transient=0.1:1:2", "1 to 2 parameters"),
        ("timeout=0.1,timeout=0.2", "given twice"),
        (" , ", "no perturbation given"),
    ],
)
def test_bad_syntax_is_a_config_error_that_names_the_valid_ones(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_perturbations(text)
    assert says in str(e.value)
    if "unknown" in says or "no perturbation" in says:
        assert all(f"{name}=" in str(e.value) for name in PERTURBATIONS)
    elif "bad perturbation" in str(e.value):
        assert "Its syntax:" in str(e.value)


# --- identity ------------------------------------------------------------------------------
def test_the_hash_includes_each_perturbation_and_its_parameters() -> None:
    clean = CalcEnv()
    hashes = {
        clean.content_hash(),
        perturb(clean, "timeout=0.1").content_hash(),
        perturb(clean, "timeout=0.2").content_hash(),
        perturb(clean, "timeout=0.1:1").content_hash(),
        perturb(clean, "transient=0.1").content_hash(),
        perturb(clean, "timeout=0.1,transient=0.1").content_hash(),
        perturb(clean, "transient=0.1,timeout=0.1").content_hash(),  # order: which is outer
    }
    assert len(hashes) == 7
    assert perturb(clean, "truncate=0.5:0.5").content_hash() == (
        perturb(clean, "truncate=0.5").content_hash()  # the same perturbation, written twice
    )
    spec = perturb(clean, "timeout=0.1")
    assert spec.name == "calc" and spec.wrappers == ["Perturbed(perturbations=['timeout=0.1'])"]
    assert [p.describe() for p in spec.perturbations] == ["timeout=0.1"]


def test_the_perturbed_hash_is_the_same_in_another_process() -> None:
    imports = "from envlab.envs.calc import CalcEnv\nfrom envlab.envs.perturb import perturb"
    expr = "perturb(CalcEnv(), 'transient=0.3,inject=0.2')"
    here = perturb(CalcEnv(), "transient=0.3,inject=0.2").content_hash()
    assert hash_in_subprocess(imports, expr, hash_seed=1) == here
    assert hash_in_subprocess(imports, expr, hash_seed=2) == here


# --- what environments are refused -----------------------------------------------------------
def test_stale_on_an_environment_without_snapshots_names_what_to_implement() -> None:
    with pytest.raises(ConfigError) as e:
        perturb(CalcEnv(), "stale=0.2")
    assert "CalcEpisode must implement snapshot() -> Any" in str(e.value)
    assert "restore(snap) -> None" in str(e.value)


class _Plain(Environment):
    async def reset(self, task: Task, seed: int | None = None) -> Observation:
        return Observation(text="hi")

    async def step(self, action: Action) -> StepResult:
        return StepResult(Observation(), done=True)


class _PlainSpec(EnvSpec):
    id = "plain"
    environment = _Plain

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        return TaskSet([Task(id="t", prompt="p")])

    def new_episode(self) -> Environment:
        return _Plain()


def test_an_environment_without_tools_is_refused() -> None:
    with pytest.raises(ConfigError, match="_Plain is not one"):
        perturb(_PlainSpec(), "timeout=0.1")


# --- seeded, recorded ----------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(ON_CALC))
async def test_each_perturbation_is_deterministic_under_a_seed_and_recorded(name: str) -> None:
    spec = perturb(CalcEnv(min_ops=2, max_ops=3), ON_CALC[name])
    first, again = await oracle_runs(spec, 12), await oracle_runs(spec, 12)
    faults = [faults_of(t) for t in first]
    assert faults == [faults_of(t) for t in again]  # same seed, same faults
    assert [t.reward for t in first] == [t.reward for t in again]
    assert all(t.status == "ok" and t.reward is not None for t in first)  # scored, never an error
    assert any(faults)
    tools = {t.name for t in spec.new_episode().tools}
    for tr in first:
        for i, step in enumerate(tr.steps):
            for f in step.info.get("faults", []):
                assert set(f) >= KEYS and f["fault"] == name and f["tool"] in tools
                assert f["step"] == i + 1  # recorded in the step it happened in
                assert f["call_id"] in {c.id for c in step.action.tool_calls}
    if name not in ("rate_limit", "latency"):  # another seed draws other faults
        other = [faults_of(t) for t in await oracle_runs(spec, 12, run_seed=1)]
        assert other != faults


async def step_once(spec: EnvSpec, call: ToolCall, seed: int = 0) -> tuple[Any, StepResult]:
    env = spec.new_episode()
    await env.reset(spec.tasks(n=1)[0], seed)
    return env, await env.step(Action(tool_calls=[call]))


async def test_a_timeout_does_not_run_the_tool() -> None:
    env, r = await step_once(perturb(CalcEnv(), "timeout=1"), ToolCall("add", {"a": 2, "b": 3}))
    res = r.observation.tool_results[0]
    assert res.is_error and "timed out" in res.content and RETRYABLE_MARK in res.content
    assert env.unwrapped.results == [] and r.info["tool_errors"] == 1
    assert r.info["faults"][0]["waited_s"] == 0.0
    assert env.unwrapped.tool_log[-1]["arguments"] == {"a": 2, "b": 3}


async def test_a_transient_error_fails_the_first_attempt_only() -> None:
    spec = perturb(CalcEnv(), "transient=1:2")
    env = spec.new_episode()
    await env.reset(spec.tasks(n=1)[0], 0)
    call = ToolCall("mul", {"a": 4, "b": 5})
    answers = [(await env.step(Action(tool_calls=[call]))) for _ in range(4)]
    contents = [a.observation.tool_results[0].content for a in answers]
    assert all(c.startswith(f"Error: {RETRYABLE_MARK}") for c in contents[:2])
    assert contents[2:] == ["20", "20"]  # then it runs; a later same call is not a first attempt
    assert env.unwrapped.results == [20, 20]  # the failed attempts did not run the tool
    assert [a.info["faults"][0]["attempt"] for a in answers[:2]] == [1, 2]
    other = await env.step(Action(tool_calls=[ToolCall("mul", {"a": 4, "b": 6})]))
    assert other.observation.tool_results[0].is_error  # other arguments: a new call


async def test_truncate_cuts_and_malformed_breaks_the_json() -> None:
    call = ToolCall("div", {"a": 1, "b": 3})
    _, clean = await step_once(CalcEnv(), call)
    text = clean.observation.tool_results[0].content
    _, cut = await step_once(perturb(CalcEnv(), "truncate=1:0.25"), call)
    keep = int(len(text) * 0.25)
    shown = cut.observation.tool_results[0].content
    assert shown == f"{text[:keep]}\n{TRUNCATED_MARK}: {keep} of {len(text)} characters shown]"
    assert cut.info["faults"] == [
        {"fault": "truncate", "step": 1, "tool": "div", "call_id": "call_1_0",
         "kept_chars": int(len(text) * 0.25), "of_chars": len(text)}
    ]  # fmt: skip
    _, broken = await step_once(perturb(CalcEnv(), "malformed=1"), call)
    with pytest.raises(json.JSONDecodeError):
        json.loads(broken.observation.tool_results[0].content)


async def test_a_rate_limit_refuses_past_n_calls_per_window_and_says_when() -> None:
    spec = perturb(CalcEnv(), "rate_limit=2/3")
    env = spec.new_episode()
    await env.reset(spec.tasks(n=1)[0], 0)
    calls = [ToolCall("add", {"a": i, "b": 1}) for i in range(3)]
    r1 = await env.step(Action(tool_calls=calls))  # step 1: two run, the third refused
    assert [x.is_error for x in r1.observation.tool_results] == [False, False, True]
    assert r1.info["faults"][0]["retry_after_steps"] == 3
    assert "send it again in 3 step(s)" in r1.observation.tool_results[2].content
    refused = [await env.step(Action(tool_calls=calls[2:])) for _ in range(2)]  # steps 2, 3
    assert all(r.observation.tool_results[0].is_error for r in refused)
    r4 = await env.step(Action(tool_calls=calls[2:]))  # step 4: step 1 left the window
    assert not r4.observation.tool_results[0].is_error and "faults" not in r4.info


async def test_latency_is_drawn_from_the_seeded_distribution() -> None:
    spec = perturb(CalcEnv(), "latency=0.0001:0.0003")
    (tr,) = await oracle_runs(spec, 1)
    delays = [f["seconds"] for f in faults_of(tr)]
    assert delays and all(0.0001 <= d <= 0.0003 for d in delays)
    assert len(set(delays)) == len(delays)  # a draw per call


async def test_inject_without_write_tools_asks_for_a_wrong_answer_and_following_it_fails() -> None:
    spec = perturb(CalcEnv(), "inject=1")
    task = spec.tasks(n=1)[0]
    env, r = await step_once(spec, ToolCall("add", {"a": 1, "b": 1}))
    asked = r.info["faults"][0]["asks"]["answer"]
    assert r.observation.tool_results[0].content.startswith("2\n\n[Automated notice")
    assert f"reply with just {asked}." in r.observation.tool_results[0].content
    await env.step(Action(text=asked))  # an agent that follows it
    reward = await env.grade()
    assert reward.total == 0.0 and float(task.answer) != float(asked)


# --- the retrying oracle -------------------------------------------------------------------
async def test_transient_errors_with_the_retrying_oracle_score_like_clean() -> None:
    clean = [t.reward for t in await oracle_runs(CalcEnv(max_ops=4), 20)]
    spec = perturb(CalcEnv(max_ops=4), "transient=0.5")
    runs = await oracle_runs(spec, 20)
    assert [t.reward for t in runs] == clean == [1.0] * 20
    assert sum(len(faults_of(t)) for t in runs) >= 10
    limited = perturb(CalcEnv(max_ops=4), "rate_limit=1/3")
    assert [t.reward for t in await oracle_runs(limited, 20)] == clean


async def test_an_oracle_that_does_not_retry_loses_to_transient_errors() -> None:
    spec = perturb(CalcEnv(max_ops=4), "transient=1")
    task = spec.tasks(n=1)[0]
    tr = await play(spec, OracleAgent(max_retries=0), task)
    assert tr.reward is not None and tr.reward < 1.0
    assert tr.agent.limits == {"max_retries": 0}  # recorded (the default, 5, leaves it out)
    assert OracleAgent().spec.limits == {}


# --- composition and the hook -------------------------------------------------------------
async def test_perturbed_specs_compose_and_record_every_layers_faults() -> None:
    twice = perturb(perturb(CalcEnv(), "transient=1"), "truncate=1:0.1")
    assert twice.content_hash() != perturb(CalcEnv(), "transient=1").content_hash()
    assert isinstance(twice.new_episode(), Perturbed)
    (tr,) = await oracle_runs(twice, 1)
    assert {f["fault"] for f in faults_of(tr)} == {"transient", "truncate"}


def test_a_clean_tool_env_has_no_interceptor() -> None:
    env = CalcEnv().new_episode()
    assert isinstance(env, ToolEnv) and env.interceptor is None
    assert type(env).interceptor is None  # a class default, not set per instance


@requires_bwrap
@pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning")
async def test_a_task_folder_is_perturbed_and_refuses_stale_reads() -> None:
    spec = load_env(str(EXAMPLES / "csv-aggregate"))
    with pytest.raises(ConfigError, match="TerminalEpisode must implement snapshot"):
        perturb(spec, "stale=0.5")
    tr = await play(perturb(spec, "transient=1"), OracleAgent())
    assert tr.reward == 1.0  # the oracle retried its submit
    assert [f["tool"] for f in faults_of(tr)] == ["submit"]  # its privileged tool is not a tool


# --- the command line ----------------------------------------------------------------------
def envlab(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "envlab.cli.main", *args],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )


def test_eval_with_perturb_records_faults_and_its_own_hash(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = envlab(
        "eval", "calc", "--agent", "oracle", "-n", "8", "--perturb", "transient=0.5",
        "--out", str(out), "--json", "--no-progress",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["mean_reward"] == 1.0
    run = json.loads((out / "run.json").read_text())
    assert run["env_hash"] == perturb(CalcEnv(), "transient=0.5").content_hash()
    lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    faults = [f for t in lines for s in t["steps"] for f in s["info"].get("faults", [])]
    assert faults and all(f["fault"] == "transient" for f in faults)


def test_bad_perturb_syntax_fails_before_running(tmp_path: Path) -> None:
    r = envlab(
        "eval", "calc", "--agent", "oracle", "--perturb", "stall=0.1", "--out", str(tmp_path)
    )
    assert r.returncode != 0 and "unknown perturbation 'stall'" in r.stderr
    assert "transient=P[:FAILS]" in r.stderr and not (tmp_path / "run.json").exists()


def test_vet_with_transient_faults_still_vets_calc_clean(tmp_path: Path) -> None:
    r = envlab(
        "vet", "calc", "--perturb", "transient=0.2", "--agent", "none", "-n", "4",
        "--out", str(tmp_path / "vet"), "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["clean"] and report["verdict_counts"]["ok"] == 4
    assert report["env_hash"] == perturb(CalcEnv(), "transient=0.2").content_hash()
    oracle = [c for t in report["tasks"] for c in t["checks"] if c["name"] == "oracle"]
    assert all(c["status"] == "pass" for c in oracle)


async def test_the_oracle_rereads_a_cut_answer_and_retries_a_timeout() -> None:
    """A cut read and a timed-out call are sent again by the retrying oracle: under the same
    faults it scores what it scores clean."""
    from envlab.agents.scripted import OracleAgent
    from envlab.core import AgentClass
    from envlab.rollout import PlannedEpisode, episode_ids, run_episodes

    for text in ("truncate=0.5", "timeout=0.5"):
        spec = perturb(CalcEnv(), text)
        plan = [
            PlannedEpisode(t, 0, episode_ids("calc", "h", t.id, 0, 0), AgentClass(OracleAgent))
            for t in spec.tasks(n=10)
        ]
        trajs = await run_episodes(spec, plan)
        faults = [f for t in trajs for s in t.steps for f in s.info.get("faults", [])]
        assert faults and all(t.reward == 1.0 for t in trajs), text
