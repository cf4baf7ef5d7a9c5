"""The wrapper example of docs/concepts.md runs as written and does what its comments say."""

from __future__ import annotations

import re
from pathlib import Path

from envlab.core import Action, ToolCall
from envlab.envs.calc import CalcEnv, CalcEpisode

CONCEPTS = Path(__file__).resolve().parents[2] / "docs" / "concepts.md"


async def test_the_wrapper_example_runs_as_written() -> None:
    blocks = re.findall(r"```python\n(.*?)```", CONCEPTS.read_text(), re.S)
    example = next(b for b in blocks if "class StaleTools(Wrapper)" in b)
    ns: dict[str, object] = {}
    exec(compile(example, str(CONCEPTS), "exec"), ns)
    spec = ns["spec"]
    stale = ns["StaleTools"]
    assert spec.content_hash() != CalcEnv(max_ops=2).content_hash()  # type: ignore[attr-defined]
    other = CalcEnv(max_ops=2).wrap(ns["StepLimit"], max_steps=6).wrap(stale, note="(old)")  # type: ignore[arg-type]
    assert spec.content_hash() != other.content_hash()  # type: ignore[attr-defined]
    env = ns["env"]
    assert isinstance(env, stale) and isinstance(env.unwrapped, CalcEpisode)  # type: ignore[arg-type, attr-defined]
    task = spec.tasks(n=1)[0]  # type: ignore[attr-defined]
    await env.reset(task, 0)  # type: ignore[attr-defined]
    op, a, b = task.metadata["steps"][0]
    result = await env.step(Action(tool_calls=[ToolCall(op, {"a": a, "b": b})]))  # type: ignore[attr-defined]
    assert result.observation.tool_results[0].content.endswith(" (stale)")
