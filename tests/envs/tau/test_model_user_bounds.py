"""The agent cannot make the simulated user's model fail (and its episode be excluded).

A real OpenAI-compatible server on 127.0.0.1 plays the user and, like a model with a small
context, refuses (HTTP 400) any request longer than it can read. Before: an agent that wrote one
huge message got its episode excluded as ``infra_error``, every retry alike.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envlab.core import Action, AgentClass, Limits, Status
from envlab.envs.tau.model_user import MAX_CONVERSATION_CHARS
from envlab.envs.tau.spec import TauRetail
from envlab.rollout import EpisodeConfig, rollout
from tests.models.fake_openai import FakeOpenAI, Scripted, completion, error
from tests.support.envs import ScriptAgent

CONTEXT_CHARS = MAX_CONVERSATION_CHARS + 12_000  # the goal and the bounded turns fit


def small_context(body: dict[str, Any]) -> Scripted:
    if len(json.dumps(body["messages"])) > CONTEXT_CHARS:
        return error(400, "This model's maximum context length is exceeded")
    return completion("Sure, go on.")


async def test_a_huge_agent_message_is_cut_for_the_user_not_excluded(tmp_path: Path) -> None:
    flood = [Action(text="x" * 2_000_000) for _ in range(3)]
    with FakeOpenAI(respond=small_context) as fake:
        spec = TauRetail(user="model", user_model=f"openai:m@{fake.base_url}", max_user_turns=5)
        run = await rollout(
            spec, AgentClass(ScriptAgent, [*flood, Action(text="done")]), spec.tasks(n=1),
            out_dir=tmp_path, config=EpisodeConfig(max_retries=1,
                                                   overrides=Limits.overrides(max_steps=6)),
        )  # fmt: skip
        sent = [json.dumps(r["messages"]) for r in fake.requests]
    [rec] = run.records
    assert rec.status in (Status.OK.value, Status.TRUNCATED.value) and rec.reward is not None
    assert all(len(s) <= CONTEXT_CHARS for s in sent)
    assert any("more characters cut" in s for s in sent)
