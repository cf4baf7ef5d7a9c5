"""The terminal environment: tools, the oracle's private solution, grading after a timeout."""

from __future__ import annotations

from pathlib import Path

import pytest

from envlab.agents.shell import ShellScriptAgent
from envlab.core import Action, Limits, Status, ToolCall
from envlab.envs.taskfolder import TerminalEnv
from envlab.rollout import EpisodeConfig
from tests.envs.taskfolder.conftest import EXAMPLES, episode, make_task, write
from tests.sandbox.conftest import requires_bwrap

pytestmark = requires_bwrap


async def test_tools_work_in_the_workspace(tmp_path: Path) -> None:
    spec = TerminalEnv(make_task(tmp_path, files={"in.txt": "data\n"}))
    task = spec.tasks()[0]
    env = spec.new_episode()
    try:
        obs = await env.reset(task, seed=0)
        assert obs.text == task.prompt
        assert [t.name for t in env.tools] == ["read_file", "run", "submit", "write_file"]
        call = [
            ToolCall("write_file", {"path": "out/x.txt", "content": "hi"}),
            ToolCall("read_file", {"path": "/app/in.txt"}),
            ToolCall("run", {"command": "cat out/x.txt; echo; pwd; exit 4"}),
            ToolCall("run", {"command": "sleep 20", "timeout_sec": 1}),
            ToolCall("read_file", {"path": "missing.txt"}),
        ]
        res = await env.step(Action(tool_calls=call))
        out = [r.content for r in res.observation.tool_results]
        assert out[0] == "wrote 2 bytes to /app/out/x.txt"
        assert out[1] == "data\n"
        assert out[2].startswith("exit code: 4") and "hi\n/app" in out[2]
        assert "timed out after 1s" in out[3]
        assert res.observation.tool_results[4].is_error and "cannot read" in out[4]
        assert res.info["tool_errors"] == 1 and not res.done
        done = await env.step(Action(tool_calls=[ToolCall("submit", {})]))
        assert done.done and done.reward == 0.0, "no grade inside step: grade() comes after"
        reward = await env.grade()
        assert reward is not None and reward.total == 1.0
    finally:
        await env.close()


async def test_the_solution_is_never_visible_to_a_normal_agent(tmp_path: Path) -> None:
    path = make_task(
        tmp_path,
        solve_sh="echo SOLUTION-MARKER > /app/answer.txt\n",
        test_sh="grep -q SOLUTION-MARKER /app/answer.txt && echo 1 > /logs/verifier/reward.txt"
        " || echo 0 > /logs/verifier/reward.txt\n",
    )
    probe = tmp_path / "probe.sh"
    write(
        probe,
        """
        ls /solution /tests /logs 2>&1
        grep -rs SOLUTION-MARKER / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr \
          --exclude-dir=dev && echo FOUND
        echo done
        """,
    )
    traj = await episode(path, ShellScriptAgent(probe))
    tool_text = next(m["content"] for m in traj.messages if m.get("role") == "tool")
    assert "FOUND" not in tool_text and "No such file" in tool_text and "done" in tool_text
    assert traj.reward == 0.0
    # calling the oracle's private tool without its token is just an unknown tool
    spec = TerminalEnv(path)
    env = spec.new_episode()
    try:
        await env.reset(spec.tasks()[0])
        res = await env.step(Action(tool_calls=[ToolCall("run_solution", {"token": "guess"})]))
        assert res.observation.tool_results[0].is_error
        assert "unknown tool" in res.observation.tool_results[0].content
    finally:
        await env.close()
    assert (await episode(path, "oracle")).reward == 1.0


async def test_an_agent_timeout_still_grades_what_it_left(tmp_path: Path) -> None:
    script = tmp_path / "slow.sh"
    write(script, "printf 'Hello, world!\\n' > /app/hello.txt\nsleep 600\n")
    traj = await episode(
        EXAMPLES / "hello-file",
        ShellScriptAgent(script),
        config=EpisodeConfig(overrides=Limits.overrides(episode_timeout_s=2), max_retries=0),
    )
    assert traj.status is Status.TIMEOUT
    assert traj.reward == 1.0, "the work done before the timeout is graded"


async def test_shell_agent_needs_a_run_tool(tmp_path: Path) -> None:
    from envlab.core import ConfigError, EpisodeContext

    (tmp_path / "s.sh").write_text("true")
    agent = ShellScriptAgent(tmp_path / "s.sh")
    assert agent.spec.name == f"shell:{tmp_path / 's.sh'}"
    with pytest.raises(ConfigError, match="'run' tool"):
        await agent.start(EpisodeContext(task_id="x", prompt="", tools=[], seed=0))
    with pytest.raises(ConfigError, match="cannot read script"):
        ShellScriptAgent(tmp_path / "nope.sh")


async def test_regrade_sees_the_same_frozen_workspace(tmp_path: Path) -> None:
    """The tests run on a copy: what they change, or a FIFO the agent left, cannot touch a
    second grading of the same final state."""
    path = make_task(
        tmp_path,
        test_sh="""
        if [ -f /app/answer.txt ] && [ ! -e /app/graded-before ]; then r=1; else r=0; fi
        touch /app/graded-before
        echo $r > /logs/verifier/reward.txt
        """,
    )
    spec = TerminalEnv(path)
    env = spec.new_episode()
    try:
        await env.reset(spec.tasks()[0])
        call = ToolCall("run", {"command": "echo 42 > answer.txt; mkfifo trap.fifo"})
        await env.step(Action(tool_calls=[call, ToolCall("submit", {})]))
        first, again = await env.grade(), await env.regrade()
        assert first is not None and first.total == 1.0
        assert again.total == 1.0 and again is not first
        assert not (env.box.host_workdir / "graded-before").exists()  # type: ignore[union-attr]
    finally:
        await env.close()


async def test_a_host_that_cannot_hold_the_workspace_is_infra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build cache cannot be made (a file where its directory should be): the machinery
    failed, never the agent (``InfraError``: retried, excluded from scores)."""
    from envlab.core import InfraError

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ENVLAB_CACHE_DIR", str(tmp_path / "a-file" / "cache"))
    spec = TerminalEnv(make_task(tmp_path))
    env = spec.new_episode()
    with pytest.raises(InfraError, match="could not set up the workspace"):
        await env.reset(spec.tasks()[0])
    await env.close()
