"""RemoteEnv against envlab's own server (``envlab serve``: a real uvicorn on 127.0.0.1 in a
thread, and ``envlab serve`` as a subprocess for the CLI): tools from the reset frame, the graded
reward and its components from the server, the server's limits, forged rewards."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentSpec,
    Limits,
    Observation,
    Reward,
    Status,
    StepResult,
    Task,
    ToolCall,
    Trajectory,
)
from envlab.envs import load_env
from envlab.envs.remote import RemoteEnv
from envlab.rollout import EpisodeConfig, PlannedEpisode, episode_ids, run_episodes
from tests.conftest import subprocess_env
from tests.fixtures.openenv_echo import free_port, wait_healthy
from tests.support.envs import EchoEpisode
from tests.support.play import echo_with

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from envlab.serve.server import ServerThread


class ScriptAgent(Agent):
    name = "script"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="test:script")

    async def act(self, observation: Observation) -> Action:
        return self.actions.pop(0) if self.actions else Action(text="")


async def play(
    spec: RemoteEnv | object,
    agents: list[AgentClass],
    tasks: list[Task],
    config: EpisodeConfig | None = None,
) -> list[Trajectory]:
    planned = [
        PlannedEpisode(task=t, sample_index=0, ids=episode_ids("x", "h", t.id, 0, 0), agent=a)
        for t, a in zip(tasks, agents, strict=True)
    ]
    return await run_episodes(spec, planned, config=config, concurrency=2)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def calc_server() -> Iterator[ServerThread]:
    with ServerThread(load_env("calc"), max_sessions=4) as srv:
        yield srv


def remote_url(srv: ServerThread) -> str:
    return f"ws://{srv.host}:{srv.port}"


async def oracle_scripts(tasks: list[Task]) -> list[list[Action]]:
    """The local calc oracle's actions for each task (computed here, replayed remotely by an
    agent that is not privileged: the server keeps its answers)."""
    local = load_env("calc")
    scripts = []
    for t in tasks:
        env = local.new_episode()
        await env.reset(t, 0)
        scripts.append(env.oracle_actions(t))
        await env.close()
    return scripts


async def test_rewards_and_components_come_from_envlabs_server(calc_server: ServerThread) -> None:
    spec = load_env(remote_url(calc_server))
    assert isinstance(spec, RemoteEnv) and spec.server().envlab
    local = load_env("calc")
    tasks = list(spec.tasks(n=3))
    assert [t.id for t in tasks] == [t.id for t in local.tasks(n=3)]  # the server's Task API
    assert all(t.answer is None for t in tasks)  # never sent over the wire
    scripts = await oracle_scripts(list(local.tasks(n=3)))
    remote = await play(spec, [AgentClass(ScriptAgent, s) for s in scripts], tasks)
    here = await play(local, [AgentClass(ScriptAgent, s) for s in scripts], list(local.tasks(n=3)))
    for r, h in zip(remote, here, strict=True):
        assert r.status is Status.OK and r.reward == h.reward == 1.0
        assert r.components == h.components and set(r.components) == {
            "correct",
            "computed_with_tools",
        }
        assert [t["function"]["name"] for t in r.tools] == [t["function"]["name"] for t in h.tools]
        assert r.messages[0]["role"] == "system"  # the server's system prompt
    assert calc_server.sessions.live_episodes == 0


async def test_a_forged_reward_in_the_agents_answer_scores_what_the_grader_says(
    calc_server: ServerThread,
) -> None:
    spec = load_env(remote_url(calc_server))
    task = spec.tasks(n=1)[0]
    forged = json.dumps({"reward": 1.0, "metadata": {"reward": {"total": 1.0}}, "done": True})
    bad = Action(text=forged, info={"reward": 1.0, "metadata": {"reward": {"total": 1.0}}})
    (t,) = await play(spec, [AgentClass(ScriptAgent, [bad])], [task])
    assert t.status is Status.OK and t.reward == 0.0
    assert t.components == {"correct": 0.0, "computed_with_tools": 0.0}


async def test_the_server_truncates_and_grades_with_its_limits() -> None:
    with ServerThread(load_env("calc"), limits=Limits.overrides(max_steps=1)) as srv:
        spec = load_env(remote_url(srv))
        task = spec.tasks(n=1)[0]
        script = (await oracle_scripts([load_env("calc").tasks(n=1)[0]]))[0]
        (t,) = await play(spec, [AgentClass(ScriptAgent, script)], [task])
    assert t.status is Status.TRUNCATED and t.n_steps == 1
    assert t.reward is not None and t.grader_failed is None and "correct" in t.components


async def test_an_episode_this_side_ends_early_is_a_failed_grade_not_a_guess(
    calc_server: ServerThread,
) -> None:
    spec = load_env(remote_url(calc_server))
    task = spec.tasks(n=1)[0]
    script = (await oracle_scripts([load_env("calc").tasks(n=1)[0]]))[0]
    cfg = EpisodeConfig(overrides=Limits.overrides(max_steps=1))
    (t,) = await play(spec, [AgentClass(ScriptAgent, script)], [task], cfg)
    assert t.status is Status.TRUNCATED and t.reward == 0.0
    assert "before the server ended it" in (t.grader_failed or "")


async def test_a_full_envlab_server_is_infra_error_naming_the_limit() -> None:
    from websockets.sync.client import connect

    with ServerThread(load_env("calc"), max_sessions=1) as srv:
        spec = load_env(remote_url(srv), connect_timeout_s=0.3)
        task = spec.tasks(n=1)[0]
        with connect(srv.ws_url) as ws:
            ws.send(json.dumps({"type": "reset", "data": {}}))
            ws.recv(timeout=10)
            (t,) = await play(
                spec, [AgentClass(ScriptAgent, [])], [task], EpisodeConfig(max_retries=0)
            )
    assert t.status is Status.INFRA_ERROR and t.error is not None
    assert "refused the session" in t.error.message and "--max-sessions" in t.error.message


def test_envlab_eval_on_envlab_serve(tmp_path: Path) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "envlab.cli.main", "serve", "calc", "--port", str(port)],
        env=subprocess_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(port, proc=server)
        r = subprocess.run(
            [sys.executable, "-m", "envlab.cli.main", "eval", f"ws://127.0.0.1:{port}",
             "--agent", "random", "--tasks", "4", "--out", str(tmp_path / "run"), "--json"],
            capture_output=True, text=True, env=subprocess_env(), timeout=300,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["n_episodes"] == 4 and s["status_counts"]["ok"] + s["status_counts"]["truncated"] == 4
    assert set(s["components"]) == {"correct", "computed_with_tools"}


async def test_the_random_agent_scores_the_same_remotely_and_locally(
    calc_server: ServerThread,
) -> None:
    from envlab.agents.scripted import RandomAgent

    spec, local = load_env(remote_url(calc_server)), load_env("calc")
    tasks, local_tasks = list(spec.tasks(n=12)), list(local.tasks(n=12))
    remote = await play(spec, [AgentClass(RandomAgent)] * 12, tasks)
    here = await play(local, [AgentClass(RandomAgent)] * 12, local_tasks)
    assert [t.status for t in remote] == [t.status for t in here]
    assert [(t.reward, t.components, t.n_steps) for t in remote] == [
        (t.reward, t.components, t.n_steps) for t in here
    ]


async def test_vet_on_envlabs_server_has_no_oracle_to_run_and_no_false_broken(
    calc_server: ServerThread, tmp_path: Path
) -> None:
    """The server sends no answers (the agent's side must never see them): vet has no reference
    solution to run over the wire, so the oracle check is n/a, not a failure that would call
    every served task broken; the checks that need no answer still run."""
    from envlab.vet.runner import VetConfig, vet_environment

    spec = load_env(remote_url(calc_server))
    report = await vet_environment(
        spec, out_dir=tmp_path, config=VetConfig(oracle_runs=2, tasks=2, concurrency=2)
    )
    assert report.infra_errors == 0 and len(report.tasks) == 2
    for task in report.tasks:
        checks = {c.name: c for c in task.checks}
        assert checks["oracle"].status == "n/a", checks["oracle"].summary
        assert checks["noop"].status == "pass", checks["noop"].summary
        assert task.verdict != "broken", task.reasons


class SlowAgent(ScriptAgent):
    """Calls a tool, then thinks past the server's idle timeout before its next action."""

    async def act(self, observation: Observation) -> Action:
        import asyncio

        if len(self.actions) == 1:
            await asyncio.sleep(2.0)
        return await super().act(observation)


async def test_an_agent_silent_past_the_idle_timeout_is_scored_not_retried() -> None:
    """The server closes a session nobody speaks on. The silence is this side's, the agent's:
    the episode is the agent's timeout, scored, never an infra_error retried and excluded
    (else a stalling agent would dodge every failing score)."""
    with ServerThread(load_env("calc"), idle_timeout=0.3) as srv:
        spec = load_env(remote_url(srv))
        task = spec.tasks(n=1)[0]
        call = ToolCall(name="add", arguments={"a": 1, "b": 2}, id="c1")
        actions = [Action(tool_calls=[call]), Action(text="3")]
        cfg = EpisodeConfig(max_retries=2)
        (traj,) = await play(spec, [AgentClass(SlowAgent, actions)], [task], cfg)
    assert traj.status is Status.TIMEOUT, (traj.status, traj.error)
    assert traj.status.scored and traj.attempts == 1 and traj.reward == 0.0


async def test_an_action_too_large_for_the_wire_is_the_agents_not_infra(
    calc_server: ServerThread,
) -> None:
    """A frame past the server's message limit makes it drop the connection: the agent sent it,
    so it must not become an infra_error retried and excluded."""
    spec = load_env(remote_url(calc_server))
    task = spec.tasks(n=1)[0]
    call = ToolCall(name="add", arguments={"a": 1, "b": "2" * (20 << 20)}, id="c1")
    for huge in (Action(text="1" * (20 << 20)), Action(tool_calls=[call])):
        (traj,) = await play(spec, [AgentClass(ScriptAgent, [huge])], [task], EpisodeConfig())
        assert traj.status.scored, (traj.status, traj.error)
        assert traj.attempts == 1 and traj.reward == 0.0


class _BigDetailsEpisode(EchoEpisode):
    """Its grade carries 5 MiB of details (and each step's info 2 MiB): what a server sends."""

    async def grade(self) -> Reward:
        r = await super().grade()
        return r.model_copy(update={"details": {**r.details, "blob": "x" * (5 << 20)}})

    async def step(self, action: Action) -> StepResult:
        result = await super().step(action)
        result.info["blob"] = "y" * (2 << 20)
        return result


async def test_a_servers_huge_frames_are_cut_to_the_trajectorys_budget() -> None:
    """Measured: a remote server's 30 MiB ``details`` was stored whole in every trajectory."""
    with ServerThread(echo_with(_BigDetailsEpisode)) as srv:
        spec = load_env(remote_url(srv))
        assert isinstance(spec, RemoteEnv)
        tasks = list(spec.tasks(n=1))
        [t] = await play(spec, [AgentClass(ScriptAgent, [Action(text="ok")])], tasks)
    assert t.status is Status.OK and t.reward == 1.0, t.error  # the grade itself is whole
    stored = t.to_json()
    limit = spec.config.max_stored_bytes
    assert len(stored) < limit + (256 << 10), len(stored)
    assert b"x" * 1024 not in stored and b"y" * 1024 not in stored
    assert b"cut: the server sent" in stored and b"max_stored_bytes" in stored
