"""A simulated user played by a model behind any OpenAI-compatible endpoint (τ-bench's style).

The model gets the task's instruction as its hidden goal and the conversation with the roles
turned round (the agent's messages are its ``user`` turns). Its time is not the agent's
(``not_agent_time``), and a failure of its endpoint is the machinery's (``InfraError``), never
the agent's. Nothing is sent until ``start()``.

So that the agent cannot cause that failure (and have its episode excluded), what the agent
says reaches the user's model bounded: each message cut at ``MAX_AGENT_CHARS`` (the user reads
that it was cut), and the conversation sent at most ``MAX_CONVERSATION_CHARS`` (the oldest turns
after the goal left out). A model that still refuses is the machinery's failure.
"""

from __future__ import annotations

from typing import Any

from envlab.core import InfraError, not_agent_time
from envlab.envs.tau.users import STOP, UserSimulator
from envlab.models.client import OpenAICompatModel, Sampling

GREETING = "Hi! How can I help you today?"
MAX_AGENT_CHARS = 8000
"""The most of one agent message the user's model reads (a long one is cut, with a note)."""
MAX_CONVERSATION_CHARS = 48_000
"""The most of the conversation sent to the user's model (the goal always; then the latest)."""

PROMPT = """You are a customer talking with a customer service agent, one message at a time.

Your goal (the agent does not see it):
{instruction}

How to play the customer:
- Write only your next message, short and natural, as the customer would.
- Reveal only what the agent needs for the current step; never the whole goal at once.
- Use only facts the goal gives you; if asked for something it does not hold, say you do not
  know it. Do not invent ids, names or numbers.
- Say things in your own words, not the goal's.
- When your goal is met, or the agent cannot meet it, write {stop} alone as your message."""


class ModelUser(UserSimulator):
    def __init__(self, model: OpenAICompatModel, instruction: str, *, max_turns: int = 20) -> None:
        self.model, self.max_turns = model, max_turns
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": PROMPT.format(instruction=instruction, stop=STOP)}
        ]
        self.turns = 0
        self._last: dict[str, Any] = {}

    @classmethod
    def from_spec(
        cls,
        target: str,
        instruction: str,
        *,
        temperature: float = 0.0,
        max_tokens: int = 256,
        seed: int | None = None,
        max_turns: int = 20,
    ) -> ModelUser:
        from envlab.agents.model_agents import parse_target

        name, url = parse_target(target.removeprefix("openai:"))
        sampling = Sampling(temperature=temperature, seed=seed, max_tokens=max_tokens)
        return cls(
            OpenAICompatModel(name, url, sampling=sampling), instruction, max_turns=max_turns
        )

    async def start(self) -> str:
        return await self._say(GREETING)

    async def reply(self, agent_message: str) -> str:
        if self.turns >= self.max_turns:
            return f"I have to go now. {STOP}"
        return await self._say(agent_message)

    async def _say(self, agent_message: str) -> str:
        if len(agent_message) > MAX_AGENT_CHARS:
            cut = len(agent_message) - MAX_AGENT_CHARS
            agent_message = f"{agent_message[:MAX_AGENT_CHARS]}\n[... {cut} more characters cut]"
        self.messages.append({"role": "user", "content": agent_message})
        try:
            async with not_agent_time("simulated user"):
                reply = await self.model.chat(self._window())
        except InfraError:
            raise
        except Exception as e:  # the user's endpoint, not the agent
            raise InfraError(f"the simulated user's model failed: {type(e).__name__}: {e}") from e
        self.turns += 1
        text = reply.text.strip()
        self.messages.append({"role": "assistant", "content": text})
        self._last = {"usage": reply.usage, "finish_reason": reply.finish_reason}
        return text

    def _window(self) -> list[dict[str, Any]]:
        """The goal, then as many of the latest turns as fit ``MAX_CONVERSATION_CHARS``."""
        goal, turns = self.messages[0], self.messages[1:]
        start = len(turns) - 1  # the message to answer always goes (it is bounded)
        room = MAX_CONVERSATION_CHARS - len(turns[start]["content"])
        while start > 0 and room >= len(turns[start - 1]["content"]):
            room -= len(turns[start - 1]["content"])
            start -= 1
        return [goal, *turns[start:]]

    @property
    def info(self) -> dict[str, Any]:
        return {
            "user": "model",
            "model": self.model.model,
            "endpoint": self.model.base_url,
            "sampling": self.model.sampling.to_dict(),
            "turn": self.turns,
            **self._last,
        }

    async def close(self) -> None:
        await self.model.aclose()
