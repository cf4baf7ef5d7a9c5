"""``ToolCallingHarness``: a chat model becomes an agent that calls an environment's tools.

Each ``act`` sends the conversation so far to the model and turns its reply into an ``Action``:

- tool calls come from the reply's native ``tool_calls`` or, failing that, from its text
  (``<tool_call>{json}</tool_call>``, a fenced JSON block, a bare JSON object; see
  ``envlab.models.toolcalls``); each goes to the environment with its arguments as the text the
  model wrote, which the environment decodes (once); broken JSON gets an error message back;
- a reply with no tool call is the final answer;
- tool results go back as ``tool`` messages (``tool_call_id``), other observations as ``user``;
  in text mode (a server without tools) results go back as ``<tool_response>`` user turns and
  the model's replies as the text it wrote, tags included.

The messages sent are the one record: ``transcript()`` returns them exactly as the model
received them, in order (the system prompt with the harness's instructions and, in text mode,
the tools block), each reply as it was sent back; each ``Action`` names the message it came
from in ``info["message_index"]``.

Limits per episode (turns, completion tokens, time) end the episode with the text so far as
the answer and ``info["harness_stop"]`` naming the limit (no model turn: no message index). The
time limit is on the agent's clock: time spent waiting for the model's queue or a rate limit
(``core.clock``) is not counted. The model's token ids and logprobs, when the server returns
them, are kept once, in the episode's ``TokenView`` (``token_view()``).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from envlab.core import (
    Action,
    Agent,
    AgentSpec,
    EpisodeContext,
    EpisodeOrderError,
    Observation,
    TokenView,
    ToolCall,
    not_agent_seconds,
)
from envlab.models.client import ModelReply, OpenAICompatModel
from envlab.models.toolcalls import parse_tool_calls, render_tool_response, render_tools_prompt

HARNESS_NAME = "tool-calling"
HARNESS_VERSION = "1"

DEFAULT_INSTRUCTIONS = (
    "Use the tools when they help: call one, read its result, then go on. When you have the "
    "answer, reply with the final answer only, without a tool call."
)


@dataclass(frozen=True, slots=True)
class HarnessLimits:
    """What one episode may spend: model calls, completion tokens, seconds."""

    max_turns: int = 16
    max_tokens: int = 8192
    max_time_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_turns < 1 or self.max_tokens < 1 or self.max_time_s <= 0:
            raise ValueError(f"harness limits must be positive, got {self}")


@dataclass(frozen=True, slots=True)
class HarnessSettings:
    """How the harness talks to the model."""

    instructions: str = DEFAULT_INSTRUCTIONS
    """Appended to the environment's system prompt."""
    tool_mode: Literal["native", "text"] = "native"
    """``native``: tools in the request's ``tools``; ``text``: tools written into the system
    prompt (Hermes) for servers without tool support, calls read from the text."""
    required_tool_turns: int = 0
    """The first N turns send ``tool_choice="required"`` (for small models that never start)."""
    parallel_tool_calls: bool | None = None
    seed_from_episode: bool = True
    """Send ``seed = episode seed + turn`` (reproducible samples) unless sampling fixes one."""


@dataclass(slots=True)
class _TokenLog:
    """Token ids of the turns so far, as one prompt and one masked completion."""

    prompt: list[int] | None = None
    full: list[int] = field(default_factory=list)
    completion: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = field(default_factory=list)
    turn_starts: list[int] = field(default_factory=list)
    broken: str | None = None

    def add(self, turn: int, reply: ModelReply) -> None:
        if self.broken:
            return
        p, c = reply.prompt_ids, reply.completion_ids
        if p is None or c is None:
            self.broken = f"turn {turn}: the server returned no token ids"
            return
        lps = (
            reply.logprobs if reply.logprobs is not None and len(reply.logprobs) == len(c) else None
        )
        if lps is None:
            self.logprobs = None
        if self.prompt is None:
            self.prompt, extra = list(p), []
        elif p[: len(self.full)] == self.full:
            extra = p[len(self.full) :]
        else:
            self.broken = (
                f"turn {turn}: the prompt does not extend the earlier turns' tokens "
                "(the conversation was re-rendered differently)"
            )
            return
        self.turn_starts.append(len(p))
        self.completion += extra + list(c)
        self.mask += [0] * len(extra) + [1] * len(c)
        if self.logprobs is not None and lps is not None:
            self.logprobs += [0.0] * len(extra) + lps
        self.full = list(p) + list(c)

    def view(self) -> TokenView | None:
        if self.broken or self.prompt is None:
            return None
        return TokenView(
            prompt_ids=self.prompt,
            completion_ids=self.completion,
            loss_mask=self.mask,
            logprobs=self.logprobs or [],
            turn_starts=self.turn_starts,
        )


class ToolCallingHarness(Agent):
    """An agent made of a chat model (``OpenAICompatModel``) and the tool-calling loop, for one
    episode. The model client is the factory's (one per episode, over a shared pool)."""

    name = HARNESS_NAME

    def __init__(
        self,
        model: OpenAICompatModel,
        *,
        agent_name: str,
        model_id: str,
        endpoint: str,
        weights_hash: str | None = None,
        limits: HarnessLimits | None = None,
        settings: HarnessSettings | None = None,
    ) -> None:
        self._model = model
        self.agent_name = agent_name
        self.model_id = model_id
        self.endpoint = endpoint
        self.weights_hash = weights_hash
        self.limits = limits or HarnessLimits()
        self.settings = settings or HarnessSettings()
        self._spec: AgentSpec | None = None
        self._started = False
        self._reset()

    def _reset(self) -> None:
        self._messages: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] = []
        self._turn = 0
        self._tokens = 0
        self._t0 = time.monotonic()
        self._waited0 = not_agent_seconds()
        self._seed = 0
        self._last_text = ""
        self._log = _TokenLog()

    @property
    def spec(self) -> AgentSpec:
        if self._spec is None:
            self._spec = self._make_spec()
        return self._spec

    def _make_spec(self) -> AgentSpec:
        s, model = self.settings, self._model
        sampling: dict[str, Any] = model.sampling.to_dict()
        if "seed" not in sampling and s.seed_from_episode:
            sampling["seed"] = "episode seed + turn"
        if s.required_tool_turns:
            sampling["tool_choice"] = f"required for the first {s.required_tool_turns} turn(s)"
        if s.parallel_tool_calls is not None:
            sampling["parallel_tool_calls"] = s.parallel_tool_calls
        if model.logprobs:
            sampling["logprobs"] = True
        harness = f"{HARNESS_NAME}/{s.tool_mode}"
        if s.instructions != DEFAULT_INSTRUCTIONS:
            digest = hashlib.sha256(s.instructions.encode()).hexdigest()[:12]
            harness += f"+instructions:{digest}"
        limits = asdict(self.limits)
        limits.update(timeout_s=model.timeout_s, max_retries=model.retry.max_retries)
        return AgentSpec(
            name=self.agent_name,
            model_id=self.model_id,
            endpoint=self.endpoint,
            weights_hash=self.weights_hash,
            sampling=sampling,
            harness=harness,
            harness_version=HARNESS_VERSION,
            limits=limits,
        )

    async def start(self, ctx: EpisodeContext) -> None:
        self._reset()
        self._started = True
        self._seed = ctx.seed
        self._tools = [t.to_openai() for t in ctx.tools]
        parts = [p for p in (ctx.system_prompt, self.settings.instructions) if p]
        if self.settings.tool_mode == "text" and self._tools:
            parts.append(render_tools_prompt(self._tools))
        if parts:
            self._messages.append({"role": "system", "content": "\n\n".join(parts)})

    def _observe(self, observation: Observation) -> None:
        if self.settings.tool_mode == "native":
            self._messages.extend(observation.to_messages())
            return
        for r in observation.tool_results:  # text mode: the server knows no tool messages
            self._messages.append({"role": "user", "content": render_tool_response(r.content)})
        if observation.text:
            self._messages.append({"role": "user", "content": observation.text})

    def _limit_hit(self, elapsed: float) -> str | None:
        lim = self.limits
        if self._turn >= lim.max_turns:
            return f"max_turns ({lim.max_turns})"
        if self._tokens >= lim.max_tokens:
            return f"max_tokens ({lim.max_tokens})"
        if elapsed >= lim.max_time_s:
            return f"max_time_s ({lim.max_time_s})"
        return None

    async def act(self, observation: Observation) -> Action:
        if not self._started:
            raise EpisodeOrderError("act() called before start(ctx); start the episode first")
        elapsed = self._elapsed()
        stop = self._limit_hit(elapsed)
        if stop is not None:  # no model turn: the observation is never sent
            return Action(text=self._last_text, info={"harness_stop": stop})
        self._observe(observation)
        s, model, lim = self.settings, self._model, self.limits
        native = s.tool_mode == "native" and bool(self._tools)
        per_turn = model.sampling.max_tokens
        left = lim.max_tokens - self._tokens
        seed = None
        if model.sampling.seed is None and s.seed_from_episode:
            seed = (self._seed + self._turn) & 0x7FFFFFFF
        waited = not_agent_seconds()
        reply = await model.chat(
            self._messages,
            tools=self._tools if native else None,
            tool_choice="required" if native and self._turn < s.required_tool_turns else None,
            parallel_tool_calls=s.parallel_tool_calls if native else None,
            timeout_s=min(model.timeout_s, lim.max_time_s - elapsed),
            max_tokens=min(per_turn, left) if per_turn else left,
            seed=seed,
        )
        waited = not_agent_seconds() - waited
        self._turn += 1
        self._tokens += reply.usage.get("completion_tokens") or len(reply.completion_ids or [])
        self._log.add(self._turn, reply)
        action = self._action(reply, native)
        if waited > 0:
            action.info["waited_s"] = round(waited, 4)  # queue and backoff, not on the clock
        return action

    def _elapsed(self) -> float:
        """Seconds of this episode on the agent's clock (waits for shared resources excluded)."""
        return time.monotonic() - self._t0 - (not_agent_seconds() - self._waited0)

    def _reply_message(self, reply: ModelReply, native: bool) -> tuple[dict[str, Any], Action]:
        """The reply as it goes back to the model, and the action it makes."""
        if reply.tool_calls:  # the server's calls, sent back as it returned them
            wire = [
                {
                    "id": c.id or self._call_id(i),
                    "type": c.type or "function",
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for i, c in enumerate(reply.tool_calls)
            ]
            msg = {"role": "assistant", "content": reply.text, "tool_calls": wire}
            calls = [
                ToolCall(w["function"]["name"], w["function"]["arguments"], id=w["id"])
                for w in wire
            ]
            return msg, Action(
                text=reply.text, tool_calls=calls, info={"tool_call_format": "native"}
            )
        parsed = parse_tool_calls(reply.text)
        calls = [
            ToolCall(c.name, c.arguments, id=self._call_id(i)) for i, c in enumerate(parsed.calls)
        ]
        info: dict[str, Any] = {"tool_call_format": parsed.calls[0].format} if calls else {}
        if calls and native:  # a server with tools wants the calls as tool_calls
            msg = {
                "role": "assistant",
                "content": parsed.content,
                "tool_calls": [c.to_dict() for c in calls],
            }
            info["raw_text"] = reply.text  # what the model wrote, which the transcript rewrites
        else:  # text mode, or a final answer: the model's own words go back as they were
            msg = {"role": "assistant", "content": reply.text}
        return msg, Action(
            text=parsed.content if calls else reply.text, tool_calls=calls, info=info
        )

    def _action(self, reply: ModelReply, native: bool) -> Action:
        msg, action = self._reply_message(reply, native)
        self._messages.append(msg)
        self._last_text = action.text
        action.info.update(
            message_index=len(self._messages) - 1,
            model=reply.model,
            finish_reason=reply.finish_reason,
            usage=reply.usage,
            attempts=reply.attempts,
            latency_s=round(reply.latency_s, 4),
        )
        if self._log.broken:
            action.info["token_view"] = f"dropped: {self._log.broken}"
        return action

    def _call_id(self, i: int) -> str:
        return f"call_{self._turn}_{i}"

    def transcript(self) -> list[dict[str, Any]] | None:
        """The messages exactly as the model received them, each reply as it was sent back
        (``None`` before ``start``: no conversation yet)."""
        return [dict(m) for m in self._messages] if self._started else None

    def token_view(self) -> TokenView | None:
        return self._log.view()

    async def close(self) -> None:
        await self._model.aclose()
