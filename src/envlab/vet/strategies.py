"""Wider trivial strategies: answers that cover many possible answers at once.

Beside the constant answers and the echoed prompt (``vet.plan``), a grader must not pay:

- ``numbers_seen``: every number of the prompt and the system prompt, in one reply;
- ``candidates_seen``: every candidate the agent can see, in one reply: values of listing tools
  (read tools without a required argument, called once each), enum values and quoted words of
  the tool schemas, comma-separated lists and options of the prompt and the system prompt;
- ``format_K``: the answer formats of the task type (those the prompts quote, ``The answer is
  N.``, ``\\boxed{N}``, ...) around the number 0;
- ``long_junk``: a long reply of words, numbers and letters.

They are judged with the constant answers (``vet.trivial``): passes beyond chance, or credit
above doing nothing that is significant across the environment.
"""

from __future__ import annotations

import re

from envlab.core import (
    Action,
    Agent,
    AgentClass,
    AgentFactory,
    AgentSpec,
    EpisodeContext,
    Observation,
    Task,
    ToolCall,
)
from envlab.vet.plan import ConstantAgent
from envlab.vet.probes import options
from envlab.vet.seen import Seen, numbers_in, quoted_in

MAX_REPLY = 4000
"""The longest reply of a strategy (characters)."""
FORMATS = ("The answer is {x}.", "Answer: {x}", "Final answer: {x}", "\\boxed{{{x}}}", "#### {x}")
_PLACEHOLDER = re.compile(r"\b(?:N|X|n|x)\b|<[^<>\n]{1,20}>|\{[^{}\n]{0,20}\}|\[[^\[\]\n]{1,20}\]")
_LIST = re.compile(r"(?:[\w][\w .'-]{0,30}\w)(?:\s*,\s*(?:or\s+|and\s+)?[\w][\w .'-]{0,30}\w){2,}")
JUNK = " ".join(
    f"lorem {i} ipsum {chr(65 + i % 8)} dolor {'yes' if i % 2 else 'no'} sit amet"
    for i in range(100)
)
"""About 3,500 characters of filler with numbers 0-99, letters A-H, yes and no."""


def listed_in(text: str) -> list[str]:
    """Items of comma-separated lists (``Options: red, green, blue``)."""
    items: list[str] = []
    for m in _LIST.finditer(text):
        for part in re.split(r"\s*,\s*", m.group(0)):
            part = re.sub(r"^(?:or|and)\s+", "", part.strip())
            if part and len(part.split()) <= 3:
                items.append(part.split(":")[-1].strip())
    return list(dict.fromkeys(i for i in items if i))


def answer_formats(*texts: str) -> list[str]:
    """Answer templates the texts quote (``'The answer is N.'``), with 0 for the placeholder,
    then the usual ones."""
    quoted = [q for t in texts for q in quoted_in(t) if _PLACEHOLDER.search(q)]
    found = [_PLACEHOLDER.sub("0", q, count=1) for q in quoted]
    return list(dict.fromkeys([*found, *(f.format(x=0) for f in FORMATS)]))


class NumbersSeenAgent(Agent):
    """Answers with every number of the prompt and the system prompt."""

    name = "numbers_seen"

    def __init__(self) -> None:
        self._reply = ""
        self._done = False

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="numbers_seen", harness="vet:strategy")

    async def start(self, ctx: EpisodeContext) -> None:
        nums = numbers_in(ctx.prompt) + numbers_in(ctx.system_prompt or "")
        self._reply = " ".join(dict.fromkeys(nums))[:MAX_REPLY]

    async def act(self, observation: Observation) -> Action:
        reply, self._reply = ("" if self._done else self._reply), ""
        self._done = True
        return Action(text=reply)


class CandidatesSeenAgent(Agent):
    """Calls every listing tool once, then answers with every candidate it saw."""

    name = "candidates_seen"

    def __init__(self) -> None:
        self._seen = Seen()
        self._extra: list[str] = []
        self._queue: list[ToolCall] = []
        self._done = False

    @property
    def spec(self) -> AgentSpec:
        return AgentSpec(name="candidates_seen", harness="vet:strategy")

    async def start(self, ctx: EpisodeContext) -> None:
        texts = [ctx.prompt, ctx.system_prompt or ""]
        for text in texts:
            self._seen.read(text)
            self._extra += listed_in(text) + options(text)
        self._seen.read_tools(ctx.tools)
        self._queue = [
            ToolCall(t.name, {}, id=f"vet_list_{i}")
            for i, t in enumerate(ctx.tools)
            if not t.writes and not t.parameters.get("required")
        ]

    async def act(self, observation: Observation) -> Action:
        for r in observation.tool_results:
            if not r.is_error:
                self._seen.read(r.content)
                self._extra += listed_in(r.content)
        if self._queue:
            return Action(tool_calls=[self._queue.pop(0)])
        if self._done:
            return Action(text="")
        self._done = True
        every = list(dict.fromkeys([*self._extra, *self._seen.candidates()]))
        return Action(text=", ".join(every)[:MAX_REPLY])


def strategy_agents(tasks: list[Task], system_prompt: str) -> dict[str, AgentFactory]:
    """The wider strategies of an environment (the formats from its first task's prompts)."""
    formats = answer_formats(system_prompt, tasks[0].prompt if tasks else "")
    out: dict[str, AgentFactory] = {
        "numbers_seen": AgentClass(NumbersSeenAgent),
        "candidates_seen": AgentClass(CandidatesSeenAgent),
    }
    for i, f in enumerate(formats):
        out[f"format_{i}"] = AgentClass(ConstantAgent, f, f"format_{i}")
    out["long_junk"] = AgentClass(ConstantAgent, JUNK, "long_junk")
    return out
