"""``envlab serve`` over the wire: OpenEnv's own clients (0.10 and 0.3), the session cap, the
order of frames, server-side grading, stateful HTTP routes and the attacks a client can try."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from openenv.core import GenericEnvClient
from websockets.exceptions import ConnectionClosed

from envlab.core import Action
from envlab.envs import load_env
from envlab.serve import wire
from envlab.serve.wire import action_to_wire
from tests.serve.conftest import frames, serving, wait_for
from tests.serve.specs import BrokenGrader, CrashingStep, Recorded

ROOT = Path(__file__).resolve().parents[2]


def calc_oracle(seed: int) -> tuple[str, list[Action]]:
    """The task the server picks for ``seed`` (no task id) and its oracle's actions."""
    spec = load_env("calc")
    tasks = spec.tasks()
    task = tasks[seed % len(tasks)]
    env = spec.new_episode()
    asyncio.run(env.reset(task, seed))
    return task.id, env.oracle_actions(task)


def test_openenv_client_plays_a_graded_calc_episode() -> None:
    task_id, actions = calc_oracle(3)
    with serving(load_env("calc")) as srv, GenericEnvClient(base_url=srv.url).sync() as c:
        first = c.reset(seed=3)
        obs = first.observation
        assert first.done is False and first.reward is None
        assert {t["function"]["name"] for t in obs["tools"]} == {"add", "sub", "mul", "div"}
        assert obs["system_prompt"] and obs["text"]
        results = [c.step(action_to_wire(a)) for a in actions]
        assert [r.done for r in results] == [False] * (len(actions) - 1) + [True]
        assert results[0].observation["tool_results"][0]["is_error"] is False
        last = results[-1]
        assert last.reward == 1.0
        assert last.metadata["reward"]["components"] == {"correct": 1.0, "computed_with_tools": 1.0}
        assert last.metadata["status"] == "ok"
        state = c.state()
        assert state["task_id"] == task_id and state["done"] is True
        assert state["step_count"] == len(actions)
        assert state["env"]["final_answer"] == actions[-1].text
    wait_for(lambda: srv.sessions.live_episodes == 0, "the episode closed")


def test_a_wrong_answer_is_graded_low_on_the_server() -> None:
    with serving(load_env("calc")) as srv, GenericEnvClient(base_url=srv.url).sync() as c:
        c.reset(seed=1)
        last = c.step({"text": "not a number"})
        assert last.done and last.reward == 0.0
        assert last.metadata["reward"]["components"]["correct"] == 0.0


def test_more_sessions_than_the_maximum_are_refused_naming_the_limit() -> None:
    with serving(load_env("calc"), max_sessions=2) as srv:
        a = GenericEnvClient(base_url=srv.url).sync()
        b = GenericEnvClient(base_url=srv.url).sync()
        a.connect(), b.connect()
        a.reset(seed=0), b.reset(seed=1)
        third = GenericEnvClient(base_url=srv.url).sync()
        with pytest.raises(Exception) as e:
            third.connect()
            third.reset(seed=2)
        assert "--max-sessions 2" in str(e.value) and "capacity" in str(e.value)
        assert len(srv.sessions.sessions) == 2
        a.close()
        wait_for(lambda: len(srv.sessions.sessions) == 1, "a's session closed")
        with GenericEnvClient(base_url=srv.url).sync() as c:  # a slot is free again
            assert c.reset(seed=2).done is False
        b.close()


def test_the_refusal_frame_says_capacity_then_the_socket_closes() -> None:
    with serving(load_env("calc"), max_sessions=1) as srv, frames(srv) as first:
        first.send(wire.reset_frame(seed=0))
        with frames(srv) as second:
            refusal = second.recv()
            assert refusal["type"] == "error" and refusal["data"]["code"] == wire.CAPACITY
            assert refusal["data"]["max_sessions"] == 1
            with pytest.raises(ConnectionClosed):  # closed by the server, not left hanging
                second.ws.recv(timeout=10)


OPENENV_03 = ROOT / ".venv" / "openenv-core-0.3"


@pytest.mark.skipif(
    not OPENENV_03.is_dir(),
    reason="the older OpenEnv client is not installed: pip install --no-deps --target "
    ".venv/openenv-core-0.3 openenv-core==0.3.0 (.ci/run does)",
)
def test_openenv_03_client_drives_the_server_too() -> None:
    _, actions = calc_oracle(2)
    script = """
import json, sys
from openenv.core import GenericEnvClient
from websockets.exceptions import ConnectionClosed
import openenv
assert "openenv-core-0.3" in openenv.__file__, openenv.__file__
actions = json.loads(sys.argv[1])
with GenericEnvClient(base_url=sys.argv[2]).sync() as c:
    r = c.reset(seed=2)
    out = {"tools": len(r.observation["tools"]), "steps": []}
    for a in actions:
        s = c.step(a)
        out["steps"].append([s.reward, s.done])
    out["state"] = c.state()
print(json.dumps(out))
"""
    payload = json.dumps([action_to_wire(a) for a in actions])
    with serving(load_env("calc")) as srv:
        env = {"PYTHONPATH": str(OPENENV_03), "PATH": "/usr/bin:/bin"}
        proc = subprocess.run(
            [sys.executable, "-c", script, payload, srv.url],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        wait_for(lambda: srv.sessions.live_episodes == 0, "the episode closed")
    assert out["tools"] == 4
    assert out["steps"][-1] == [1.0, True]
    assert out["state"]["done"] is True and out["state"]["step_count"] == len(actions)


# --- attacks: what a client sends cannot set its reward or reach another episode -----------------
def test_a_forged_reward_in_step_data_is_refused_and_changes_nothing() -> None:
    with serving(load_env("calc")) as srv, frames(srv) as f:
        f.send(wire.reset_frame(seed=1))
        for forged in ({"text": "7", "reward": 1.0}, {"text": "7", "done": True, "reward": 99}):
            err = f.send({"type": "step", "data": forged})
            assert err["type"] == "error" and err["data"]["code"] == wire.BAD_REQUEST
        assert f.send(wire.state_frame())["data"]["step_count"] == 0
        last = f.send({"type": "step", "data": {"text": "not the answer"}})
        assert last["data"]["done"] and last["data"]["reward"] == 0.0


def test_stepping_after_done_or_before_reset_is_an_order_error() -> None:
    with serving(load_env("calc")) as srv, frames(srv) as f:
        err = f.send({"type": "step", "data": {"text": "1"}})
        assert (
            err["data"]["code"] == wire.EPISODE_ORDER and "before reset" in err["data"]["message"]
        )
        f.send(wire.reset_frame(seed=0))
        done = f.send({"type": "step", "data": {"text": "1"}})
        assert done["data"]["done"]
        again = f.send({"type": "step", "data": {"text": "-4"}})
        assert again["type"] == "error" and again["data"]["code"] == wire.EPISODE_ORDER
        state = f.send(wire.state_frame())["data"]
        assert state["step_count"] == 1 and state["env"]["final_answer"] == "1"


def test_another_sessions_episode_id_reaches_only_a_label() -> None:
    with serving(load_env("calc")) as srv, frames(srv) as a, frames(srv) as b:
        a.send(wire.reset_frame(seed=0, episode_id="ep-A"))
        b.send(wire.reset_frame(seed=0, episode_id="ep-A"))  # B claims A's episode id
        b.send({"type": "step", "data": {"text": "12345"}})
        err = b.send({"type": "step", "data": {"text": "x", "episode_id": "ep-A"}})
        assert err["data"]["code"] == wire.BAD_REQUEST
        state_a = a.send(wire.state_frame())["data"]
        assert state_a["step_count"] == 0 and state_a["done"] is False
        assert state_a["env"]["final_answer"] is None


def test_an_http_session_id_cannot_be_driven_over_another_route() -> None:
    with (
        serving(load_env("calc")) as srv,
        httpx.Client(base_url=srv.url) as http,
        frames(srv) as ws,
    ):
        ws.send(wire.reset_frame(seed=0))
        ws_session = next(iter(srv.sessions.sessions))
        r = http.post("/step", json={"action": {"text": "1"}, "session_id": ws_session})
        assert r.status_code == 409 and r.json()["detail"]["code"] == wire.EPISODE_ORDER
        assert ws.send(wire.state_frame())["data"]["step_count"] == 0


# --- grading and failures ---------------------------------------------------------------------
def test_a_grader_that_fails_twice_scores_zero_with_the_reason() -> None:
    with serving(BrokenGrader()) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        last = f.send({"type": "step", "data": {"text": "ok"}})["data"]
        assert last["done"] and last["reward"] == 0.0
        assert "the reward file is missing" in last["metadata"]["grader_failed"]


def test_running_out_of_steps_is_truncated_and_graded() -> None:
    call = {"tool_calls": [{"id": "c", "name": "repeat", "arguments": {"text": "a"}}]}
    with serving(Recorded()) as srv, frames(srv) as f:  # max_steps=3
        f.send(wire.reset_frame(task_id="echo-1"))
        steps = [f.send({"type": "step", "data": call})["data"] for _ in range(3)]
        assert [s["done"] for s in steps] == [False, False, True]
        last = steps[-1]
        assert last["observation"]["truncated"] and last["metadata"]["status"] == "truncated"
        assert last["reward"] == 0.0 and "reward" in last["metadata"]


def test_limits_given_to_the_server_go_over_the_tasks() -> None:
    from envlab.core import Limits

    with serving(Recorded(), limits=Limits.overrides(max_steps=1)) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        call = {"tool_calls": [{"id": "c", "name": "repeat", "arguments": {"text": "a"}}]}
        assert f.send({"type": "step", "data": call})["data"]["done"] is True


def test_an_environment_that_raises_is_env_error_and_a_bad_tool_call_is_the_agents() -> None:
    with serving(CrashingStep()) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        bad = f.send(
            {"type": "step", "data": {"tool_calls": [{"name": "nope", "arguments": "{"}]}}
        )["data"]
        assert bad["observation"]["tool_results"][0]["is_error"] and not bad["done"]
        err = f.send({"type": "step", "data": {"text": "crash"}})
        assert err["type"] == "error" and err["data"]["code"] == wire.ENV_ERROR
        assert "the environment broke" in err["data"]["message"]
        assert srv.sessions.live_episodes == 0
        assert (
            f.send({"type": "step", "data": {"text": "ok"}})["data"]["code"] == wire.EPISODE_ORDER
        )


def test_a_second_reset_closes_the_first_episode_and_starts_a_fresh_one() -> None:
    from tests.serve.specs import CLOSED

    CLOSED.clear()
    with serving(Recorded()) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        f.send(wire.reset_frame(task_id="echo-1"))
        assert CLOSED == ["echo-0"] and srv.sessions.live_episodes == 1
        assert f.send(wire.state_frame())["data"]["task_id"] == "echo-1"
        unknown = f.send(wire.reset_frame(task_id="echo-99"))
        assert (
            unknown["data"]["code"] == wire.BAD_REQUEST and "echo-99" in unknown["data"]["message"]
        )


def test_malformed_frames_are_answered_and_the_session_goes_on() -> None:
    with serving(load_env("calc")) as srv, frames(srv) as f:
        for raw in ("{", '{"type": "jump"}', "[" * 50000):
            assert f.send(raw)["data"]["code"] == wire.BAD_REQUEST
        assert f.send(wire.reset_frame(seed=0))["type"] == "observation"


# --- HTTP routes keep their state ---------------------------------------------------------------
def test_http_reset_step_state_keep_one_episode_by_session_id() -> None:
    _, actions = calc_oracle(4)
    with serving(load_env("calc")) as srv, httpx.Client(base_url=srv.url) as http:
        r = http.post("/reset", json={"seed": 4})
        sid = r.headers[wire.SESSION_HEADER]
        assert r.json()["session_id"] == sid and r.json()["done"] is False
        for a in actions:
            out = http.post(
                "/step", json={"action": action_to_wire(a)}, headers={wire.SESSION_HEADER: sid}
            )
        assert out.json()["done"] and out.json()["reward"] == 1.0
        state = http.get("/state", params={"session_id": sid}).json()
        assert state["step_count"] == len(actions) and state["done"]
        no = http.post("/step", json={"action": {"text": "1"}})
        assert no.status_code == 400 and "POST /reset first" in no.json()["detail"]["message"]
        assert http.post("/close", headers={wire.SESSION_HEADER: sid}).status_code == 200
        gone = http.get("/state", headers={wire.SESSION_HEADER: sid})
        assert gone.status_code == 409
        assert len(srv.sessions.sessions) == 0


def test_idle_http_sessions_are_reaped() -> None:
    with serving(load_env("calc"), idle_timeout=0.2) as srv, httpx.Client(base_url=srv.url) as http:
        sid = http.post("/reset", json={"seed": 0}).headers[wire.SESSION_HEADER]
        wait_for(lambda: srv.sessions.reaped >= 1, "the idle session reaped")
        assert srv.sessions.live_episodes == 0
        r = http.post("/step", json={"action": {"text": "1"}}, headers={wire.SESSION_HEADER: sid})
        assert r.status_code == 409 and "reaped" in r.json()["detail"]["message"]


def test_an_idle_websocket_is_told_and_closed_and_its_episode_freed() -> None:
    with serving(Recorded(), idle_timeout=0.3) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        told = f.recv()
        assert told["type"] == "error" and told["data"]["code"] == wire.IDLE_TIMEOUT
        assert "--idle-timeout" in told["data"]["message"]
        wait_for(lambda: srv.sessions.live_episodes == 0 and not srv.sessions.sessions, "freed")


def test_info_and_task_routes() -> None:
    spec = load_env("calc")
    with serving(spec, max_sessions=3) as srv, httpx.Client(base_url=srv.url) as http:
        health = http.get("/health").json()
        assert health == {
            "status": "healthy",
            "active_sessions": 0,
            "max_sessions": 3,
            "live_episodes": 0,
        }
        meta = http.get("/metadata").json()
        assert meta["name"] == "calc" and meta["content_hash"] == spec.content_hash()
        schema = http.get("/schema").json()
        assert "tool_calls" in schema["action"]["properties"]
        assert "reward" not in schema["action"]["properties"]
        assert http.get("/list_environments").json() == ["calc"]
        tasks = http.post("/calc/tasks", json={"split": "test", "n": 3}).json()["tasks"]
        assert [t["id"] for t in tasks] == [t.id for t in spec.tasks().head(3)]
        assert all(set(t) == {"id", "prompt", "split"} for t in tasks), "never the answer"
        assert http.post("/calc/num_tasks", json={"split": "test"}).json()["num_tasks"] == len(
            spec.tasks()
        )
        one = http.post("/calc/task", json={"split": "test", "index": 1}).json()["task"]
        assert one["id"] == spec.tasks()[1].id
        assert http.post("/other/tasks", json={"split": "test"}).status_code == 404


def test_http_sessions_count_toward_the_maximum() -> None:
    with serving(load_env("calc"), max_sessions=1) as srv, httpx.Client(base_url=srv.url) as http:
        assert http.post("/reset", json={"seed": 0}).status_code == 200
        refused = http.post("/reset", json={"seed": 1})
        assert refused.status_code == 503
        assert refused.json()["detail"]["code"] == wire.CAPACITY
        assert "--max-sessions 1" in refused.json()["detail"]["message"]
        assert len(srv.sessions.sessions) == 1


def test_a_step_past_the_step_timeout_is_the_agents_timeout_and_graded() -> None:
    from envlab.core import Limits

    slow = {"tool_calls": [{"id": "w", "name": "wait", "arguments": {"seconds": 30}}]}
    limits = Limits.overrides(step_timeout_s=0.2)
    with serving(Recorded(), limits=limits) as srv, frames(srv) as f:
        f.send(wire.reset_frame(task_id="echo-0"))
        last = f.send({"type": "step", "data": slow})["data"]
        assert last["done"] and last["metadata"]["status"] == "timeout"
        assert "step_timeout_s=0.2" in last["metadata"]["error"]
        assert last["reward"] == 0.0 and last["metadata"]["reward"]["total"] == 0.0
        wait_for(lambda: srv.sessions.live_episodes == 0, "the episode closed")


def test_frames_sent_ahead_are_answered_in_order_also_during_a_slow_step() -> None:
    slow = {"tool_calls": [{"id": "w", "name": "wait", "arguments": {"seconds": 0.3}}]}
    with serving(Recorded()) as srv, frames(srv) as f:
        for frame in (
            wire.reset_frame(task_id="echo-0"),
            {"type": "step", "data": slow},  # slow: the socket is watched meanwhile
            wire.state_frame(),
            {"type": "step", "data": {"text": "ok"}},
        ):
            f.ws.send(json.dumps(frame))
        answers = [f.recv() for _ in range(4)]
        assert [a["type"] for a in answers] == [
            "observation",
            "observation",
            "state",
            "observation",
        ]
        assert answers[1]["data"]["observation"]["tool_results"][0]["content"] == "done"
        assert answers[2]["data"]["step_count"] == 1
        assert answers[3]["data"]["done"] and answers[3]["data"]["reward"] == 1.0
