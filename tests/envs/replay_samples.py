"""Logged sessions and scripted agents for the replay tests: a small bank (two sessions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envlab.agents.scripted import OracleAgent
from envlab.core import Action, Agent, AgentClass, AgentSpec, EpisodeContext, Observation, ToolCall
from envlab.envs.replay import ReplaySpec, build_sim
from envlab.envs.replay.format import LogSession
from envlab.rollout import PlannedEpisode, episode_ids, run_episodes


class Scripted(Agent):
    """Says the given actions in order, then an empty answer."""

    name = "scripted-test"

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name=self.name, harness="scripted:test")

    async def act(self, observation: Observation) -> Action:
        return self.actions.pop(0) if self.actions else Action(text="")


class OracleThen(OracleAgent):
    """The oracle, with the first write call replaced (``replace``) or a call made first."""

    def __init__(self, replace: ToolCall | None = None, first: ToolCall | None = None) -> None:
        super().__init__()
        self.replace, self.first = replace, first

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="oracle-then", harness="scripted:oracle-then", privileged=True)

    async def start(self, ctx: EpisodeContext) -> None:
        await super().start(ctx)
        writes = {t.name for t in ctx.tools if t.writes}
        if self.replace is not None:
            i = next(
                i
                for i, a in enumerate(self._queue)
                if a.tool_calls and a.tool_calls[0].name in writes
            )
            self._queue[i] = Action(tool_calls=[self.replace])
        if self.first is not None:
            self._queue.insert(0, Action(tool_calls=[self.first]))


async def run_all(spec: ReplaySpec, agent: AgentClass) -> dict[str, Any]:
    tasks = spec.tasks()
    h = spec.content_hash()
    plans = [PlannedEpisode(t, 0, episode_ids(spec.name, h, t.id, 0, 0), agent) for t in tasks]
    return {t.task_id: t for t in await run_episodes(spec, plans, concurrency=4)}


# --- a small hand-written log ------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_balance",
            "description": "The balance of an account.",
            "parameters": {
                "type": "object",
                "properties": {"account": {"type": "string"}},
                "required": ["account"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "transfer",
            "description": "Send money.",
            "parameters": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "to": {"type": "string"},
                    "amount": {"type": "integer"},
                },
                "required": ["source", "to", "amount"],
            },
        },
    },
]


def call(cid: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": cid,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
        ],
    }


def result(cid: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": content, **extra}


TRANSFER = {
    "session_id": "s-transfer",
    "goal": "Send 5 dollars from alice to bob.",
    "tools": TOOLS,
    "writes": ["transfer"],
    "outcome": {"success": True, "reward": 1.0},
    "messages": [
        {"role": "system", "content": "You are a bank assistant."},
        {"role": "user", "content": "Hi, please send 5 dollars from my account alice to bob."},
        call("c1", "get_balance", {"account": "alice"}),
        result("c1", '{"account": "alice", "balance": 20}'),
        {"role": "assistant", "content": "You have 20. Shall I send 5 to bob (yes/no)?"},
        {"role": "user", "content": "Yes, please."},
        call("c2", "transfer", {"source": "alice", "to": "bob", "amount": 5}),
        result("c2", '{"ok": true, "balance": 15}'),
        {"role": "assistant", "content": "Done: 5 sent to bob."},
    ],
}
BALANCE = {
    "session_id": "s-balance",
    "writes": ["transfer"],
    "outcome": {"success": True},
    "messages": [
        {"role": "user", "content": "What is my balance? I am carol."},
        call("b1", "get_balance", {"account": "carol"}),
        result("b1", "Error: account carol is frozen", is_error=True),
        {"role": "assistant", "content": "Your account is frozen."},
    ],
}


async def run_all_one(spec: ReplaySpec, agent: Agent, task: Any) -> dict[str, Any]:
    """One episode of ``task`` by this ``agent`` object, by task id."""
    from tests.support.play import play

    return {task.id: await play(spec, agent, task)}


def sessions_of(rows: list[dict[str, Any]]) -> list[LogSession]:
    """Sessions from plain rows, checked."""
    return [LogSession.model_validate(r) for r in rows]


def make_bank(tmp_path: Path) -> Path:
    """The two bank sessions as a log file, built into a replay directory (returned)."""
    logs = tmp_path / "bank.jsonl"
    logs.write_text("".join(json.dumps(s) + "\n" for s in (TRANSFER, BALANCE)))
    build_sim(logs, tmp_path / "sim")
    return tmp_path / "sim"
