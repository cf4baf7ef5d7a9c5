"""Simulated users of a τ domain: a scripted, deterministic one and a model-backed one.

A ``UserSimulator`` opens the conversation (``start``) and answers each message the agent sends
(``reply``); it ends the conversation by saying τ-bench's stop token, ``###STOP###``. Neither
calls anything while it is made: the model-backed one sends its first request in ``start``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

STOP = "###STOP###"

_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+")
USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d{3,5}\b")
"""A τ user id (``mia_li_3668``)."""
_NAME = re.compile(
    r"(?:You are|You're|Your name is|You name is|called|named)\s+([A-Z][a-z]+) ([A-Z][a-z]+)\b"
)
_ZIP = re.compile(r"(?<![#\w])(\d{5})(?!\d)")
_ASKS_CONFIRM = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|would you like me to|do you want me to|"
    r"yes/no|\(yes\)|is that correct|is this correct|correct\?)",
    re.I,
)
_SUCCESS = re.compile(
    r"\b(successfully|has been (?:cancelled|canceled|updated|modified|changed|booked|processed|"
    r"exchanged|returned|refunded|sent)|is now (?:cancelled|canceled|booked|updated)|"
    r"transferr(?:ed|ing) you)\b",
    re.I,
)
_REFUSAL = re.compile(r"\b(unable to|cannot|can't|not able to|not eligible|not allowed)\b", re.I)
_ASKS_IDENTITY = re.compile(
    r"\b(your|the) (user ?id|user_id|e-?mail(?: address)?|(?:full )?name|zip(?: code)?)\b"
    r"|\b(identify|verify|authenticate) you",
    re.I,
)


class UserSimulator(ABC):
    """The user the agent talks to. ``info`` is recorded on each user turn (who spoke, and a
    model-backed user's model and sampling)."""

    @abstractmethod
    async def start(self) -> str:
        """The user's opening message."""

    @abstractmethod
    async def reply(self, agent_message: str) -> str:
        """The user's answer to the agent's message; contains ``STOP`` when the user is done."""

    @property
    def info(self) -> dict[str, Any]:
        return {"user": type(self).__name__}

    async def close(self) -> None:
        return None


@dataclass
class Facts:
    """What the instruction says about who the user is: handed over only when asked."""

    user_id: str | None = None
    email: str | None = None
    """Written as the instruction has it: ``a@x.com or b@x.com`` when it names two."""
    first_name: str | None = None
    last_name: str | None = None
    zip: str | None = None

    @classmethod
    def of(cls, instruction: str) -> Facts:
        facts = cls()
        if m := USER_ID.search(instruction):
            facts.user_id = m.group(0)
        if m := _EMAIL.search(instruction):
            facts.email = " or ".join(e.rstrip(".") for e in _EMAIL.findall(instruction))
        if m := _NAME.search(instruction):
            facts.first_name, facts.last_name = m.group(1), m.group(2)
            near = _ZIP.search(instruction, m.end(), m.end() + 80)  # "... in 19122"
            if z := near or _ZIP.search(instruction):
                facts.zip = z.group(1)
        return facts


def first_person(text: str) -> str:
    """The instruction ("You are ... you want ...") as the user would say it ("I am ...")."""
    swaps = [
        (r"\bYou are\b", "I am"),
        (r"\byou are\b", "I am"),
        (r"\bYou're\b", "I'm"),
        (r"\byou're\b", "I'm"),
        (r"\bYou name\b", "My name"),
        (r"\bYour\b", "My"),
        (r"\byour\b", "my"),
        (r"\byourself\b", "myself"),
        (r"\bYou\b", "I"),
        (r"\byou\b", "I"),
    ]
    for pattern, repl in swaps:
        text = re.sub(pattern, repl, text)
    return text


@dataclass
class ScriptedUser(UserSimulator):
    """A deterministic user built from the task's instruction.

    It opens with its request (the instruction in the first person, without the identity facts),
    gives the identity facts the instruction holds when the agent asks for them (email, name and
    zip, user id), says yes whenever the agent asks it to confirm, and says ``STOP`` when the
    agent reports the request done or refused, or after ``max_turns`` of its own turns."""

    instruction: str
    max_turns: int = 20
    facts: Facts = field(init=False)
    turns: int = field(init=False, default=0)
    confirmed: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.facts = Facts.of(self.instruction)

    async def start(self) -> str:
        self.turns = 1
        sentences = re.split(r"(?<=[.!?])\s+", self.instruction.strip())
        request = [s for s in sentences if not self._is_identity(s)] or sentences
        return "Hi! " + first_person(" ".join(request))

    def _is_identity(self, sentence: str) -> bool:
        """A short sentence that states who the user is: held back until the agent asks."""
        f = self.facts
        facts = (f.email, f.user_id, f.zip, f.last_name and f"{f.first_name} {f.last_name}")
        return len(sentence) < 120 and any(x and x in sentence for x in facts)

    async def reply(self, agent_message: str) -> str:
        self.turns += 1
        if self.turns > self.max_turns:
            return f"I have to go now, thanks. {STOP}"
        if _ASKS_IDENTITY.search(agent_message):
            identity = self._identity(agent_message.lower())
            if identity:
                return identity
        if _ASKS_CONFIRM.search(agent_message):
            self.confirmed += 1
            return "Yes, please proceed."
        if _SUCCESS.search(agent_message) or (
            _REFUSAL.search(agent_message) and "?" not in agent_message
        ):
            return f"Thank you, that is all. {STOP}"
        return "Could you please help me with my request?"

    def _identity(self, text: str) -> str | None:
        f = self.facts
        parts = []
        if ("user id" in text or "user_id" in text) and f.user_id:
            parts.append(f"My user id is {f.user_id}.")
        if "email" in text and f.email:
            parts.append(f"My email is {f.email}.")
        if ("name" in text or "zip" in text) and f.first_name:
            zip_part = f" and my zip code is {f.zip}" if f.zip else ""
            parts.append(f"My name is {f.first_name} {f.last_name}{zip_part}.")
        if not parts:
            return self._any_identity()
        return " ".join(parts) or None

    def _any_identity(self) -> str | None:
        f = self.facts
        if f.user_id:
            return f"My user id is {f.user_id}."
        if f.email:
            return f"My email is {f.email}."
        if f.first_name:
            return f"My name is {f.first_name} {f.last_name} and my zip code is {f.zip}."
        return None

    @property
    def info(self) -> dict[str, Any]:
        return {"user": "scripted", "turn": self.turns}
