"""Whose failure the agent's model endpoint failing is: the agent's (model + harness +
operations), decided once by the engine; only a run on a trusted endpoint may exclude them.

The attacks run on a real OpenAI-compatible server on 127.0.0.1 (``tests.models.fake_openai``):
an endpoint that fails exactly the tasks its model cannot solve must not get them excluded.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest

from envlab.agents.model_agents import openai
from envlab.cli.evaluate import Evaluation, evaluate
from envlab.core import Status
from envlab.envs.arith import ArithEnv
from envlab.measure.runs import load_run
from envlab.rollout import EpisodeConfig
from tests.models.fake_openai import FakeOpenAI, Scripted, completion, error
from tests.support.envs import EchoEnv
from tests.support.play import play

N_TASKS = 60
SOLVED = 9


def _dodger(answers: dict[str, str], failure: Scripted) -> FakeOpenAI:
    """Answers right on the first ``SOLVED`` tasks; on the others (which its model cannot
    solve) it answers ``failure`` every time: an endpoint that picks which episodes count."""
    solvable = dict(list(answers.items())[:SOLVED])

    def respond(body: dict[str, Any]) -> Scripted:
        said = json.dumps(body["messages"])
        for prompt, answer in solvable.items():
            if json.dumps(prompt)[1:-1] in said:
                return completion(f"The answer is {answer}.")
        return failure

    return FakeOpenAI(respond=respond)


async def _run_dodged(tmp_path: Path, failure: Scripted, policy: str = "agent") -> Evaluation:
    spec = ArithEnv()
    tasks = spec.tasks(n=N_TASKS)
    answers = {t.prompt: str(t.answer) for t in tasks}
    with _dodger(answers, failure) as fake:
        factory = openai(f"m@{fake.base_url}", max_retries=1, backoff_s=0.0)
        try:
            return await evaluate(
                spec, factory, tasks, out_dir=tmp_path / "run", concurrency=8,
                config=EpisodeConfig(max_retries=1, retry_backoff=0.0,
                                     model_failures=policy),  # type: ignore[arg-type]
            )  # fmt: skip
        finally:
            await factory.aclose()


async def test_an_endpoint_that_fails_the_hard_tasks_scores_what_it_solved(
    tmp_path: Path,
) -> None:
    """The measured attack: HTTP 503 on every task the model cannot solve moved arith from
    0.150 to 1.000 (51 of 60 excluded). Now each of those is the agent's failure."""
    ev = await _run_dodged(tmp_path, error(503, "overloaded"))
    s = ev.summary
    assert s.n_scored == N_TASKS and s.n_excluded == 0
    assert s.mean_reward == pytest.approx(SOLVED / N_TASKS)
    assert s.pass_at_k[1] == pytest.approx(SOLVED / N_TASKS)
    assert s.n_model_failed == N_TASKS - SOLVED and s.model_failures == "agent"
    assert s.status_counts["agent_error"] == N_TASKS - SOLVED
    assert s.status_counts["infra_error"] == 0
    # the record says so, and a summary read back from the directory agrees
    again = load_run(ev.result.run_dir).summarize()
    assert again.n_model_failed == s.n_model_failed and again.mean_reward == s.mean_reward
    first = ev.details.first_errors["agent_error"]
    assert "the agent's failure" in first and "503" in first


@pytest.mark.parametrize(
    "failure",
    [
        error(500, "internal"),
        error(429, "slow down"),
        Scripted(status=200, body={"id": "x", "choices": "garbage"}),
        Scripted(status=200, body={"not": "a completion"}),
        Scripted(status=200, body=None),
        # a lone surrogate: JSON that decodes to text no encoder can write
        Scripted(status=200, body=json.loads(json.dumps(completion("\ud800").body))),
        Scripted(status=200, body={"choices": []}),
    ],
    ids=["500", "429", "garbage", "not-completion", "null", "surrogate", "no-choices"],
)
async def test_every_kind_of_endpoint_failure_is_the_agents(
    tmp_path: Path, failure: Scripted
) -> None:
    with FakeOpenAI(respond=lambda body: failure) as fake:
        factory = openai(f"m@{fake.base_url}", max_retries=1, backoff_s=0.0)
        try:
            t = await play(EchoEnv(), factory, max_retries=2)
        finally:
            await factory.aclose()
    assert t.status is Status.AGENT_ERROR and t.scored and t.reward == 0.0, t.error
    assert t.error is not None and t.error.kind == "model" and t.error.phase in ("act", "start")
    assert t.attempts == 1  # the agent's failure is never retried by the engine
    assert t.record().model_failed


def _hanging_server() -> tuple[FakeOpenAI, threading.Event]:
    """Accepts the request and never answers until released."""
    release = threading.Event()

    def respond(body: dict[str, Any]) -> Scripted:
        release.wait(30)
        return error(503, "released")

    return FakeOpenAI(respond=respond), release


async def test_an_endpoint_that_never_answers_is_the_agents_failure() -> None:
    fake, release = _hanging_server()
    with fake:
        factory = openai(f"m@{fake.base_url}", max_retries=1, backoff_s=0.0, timeout_s=0.3)
        try:
            t = await play(EchoEnv(), factory, max_retries=2)
        finally:
            release.set()
            await factory.aclose()
    assert t.status is Status.AGENT_ERROR and t.scored and t.reward == 0.0, t.error
    assert t.error is not None and t.error.kind == "model" and "timed out" in t.error.message


async def test_the_endpoints_waits_cannot_push_the_episode_past_the_wait_limit() -> None:
    """Retry-After waits were taken off the agent's clock and counted against the machinery's
    wait limit: an endpoint asking for long waits turned its episode into ``infra_error``.
    In a run where model failures are the agent's, its waits are the agent's time."""
    with FakeOpenAI() as fake:
        fake.push(error(503, "busy", {"Retry-After": "0.3"}), completion("ok"))
        factory = openai(f"m@{fake.base_url}", max_retries=2, backoff_s=0.0)
        try:
            t = await play(EchoEnv(), factory, wait_timeout=0.1)
        finally:
            await factory.aclose()
    assert t.status is Status.OK and t.reward == 1.0, t.error
    assert t.timings.waited_s == 0.0


async def test_a_trusted_endpoint_run_may_exclude_model_failures_and_says_so(
    tmp_path: Path,
) -> None:
    ev = await _run_dodged(tmp_path, error(503, "overloaded"), policy="exclude")
    s = ev.summary
    assert s.model_failures == "exclude" and s.n_model_failed == N_TASKS - SOLVED
    assert s.status_counts["infra_error"] == N_TASKS - SOLVED and s.n_scored == SOLVED
    info = json.loads((ev.result.run_dir / "run.json").read_text())
    assert info["episode_config"]["model_failures"] == "exclude"
    assert load_run(ev.result.run_dir).summarize().model_failures == "exclude"
    assert "--model-failures exclude" in ev.details.first_errors["infra_error"]


async def test_a_resume_cannot_switch_the_policy(tmp_path: Path) -> None:
    from envlab.core import ConfigError

    await _run_dodged(tmp_path, error(503, "overloaded"), policy="exclude")
    with pytest.raises(ConfigError, match=re.escape("model_failures")):
        spec = ArithEnv()
        factory = openai("m@http://127.0.0.1:9/v1", max_retries=0)
        try:
            await evaluate(spec, factory, spec.tasks(n=N_TASKS), out_dir=tmp_path / "run",
                           resume=True, config=EpisodeConfig(model_failures="agent"))  # fmt: skip
        finally:
            await factory.aclose()


def test_a_bad_policy_is_a_clear_error() -> None:
    from envlab.core import ConfigError

    with pytest.raises(ConfigError, match="agent' or 'exclude"):
        EpisodeConfig(model_failures="ignore")  # type: ignore[arg-type]


async def test_a_comparison_says_when_a_run_excluded_its_model_failures(tmp_path: Path) -> None:
    from envlab.measure.compare import compare_runs

    await _run_dodged(tmp_path / "a", error(503, "overloaded"))
    await _run_dodged(tmp_path / "b", error(503, "overloaded"), policy="exclude")
    cmp = compare_runs(tmp_path / "a" / "run", tmp_path / "b" / "run")
    assert any("B excluded its model failures" in n and "51 episodes" in n for n in cmp.notes)
    assert not any(n.startswith("A excluded") for n in cmp.notes)
