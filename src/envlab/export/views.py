"""The model's view of an episode: the messages and tools its chat template was given.

A trainer re-renders an exported row with the model's stock chat template
(``apply_chat_template(prompt, tools=tools, add_generation_prompt=True)``, as TRL, verl, vLLM
and SGLang do); the ids it gets are the ids the model saw only when the row holds what *the
template* received, which is not always the request the harness sent:

- ``template``: a server that renders the request with the model's own chat template (vLLM,
  SGLang, a tokenizer directory): the harness's messages exactly as sent (the system prompt
  with its instructions, and in text mode its tools block) and, in native tool mode, the
  request's ``tools``;
- ``engine``: envlab's embedded engine (``envlab serve-model``, the ``smollm2`` agent). Small
  chat templates know no tools, so the engine writes them into the messages first
  (``models.prompt.hermes_messages``: the tools block at the end of the system prompt, each
  call as ``<tool_call>`` text, each result as ``<tool_response>`` text) and renders those
  with no ``tools``. A turn whose ``tool_choice`` forced a call also got a *prefill* after the
  generation prompt (``<tool_call>\\n{"name": "``): text the model did not sample, which starts
  its reply.

Which one a run's prompts went through is the run's model: the embedded model's runs are
``engine``, every other run ``template``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from envlab.core import AgentSpec, Trajectory

ViewKind = Literal["engine", "template"]

_REQUIRED = re.compile(r"required for the first (\d+) turn")


@dataclass(slots=True, frozen=True)
class ModelView:
    """What the chat template rendered each model turn's prompt from."""

    kind: ViewKind
    messages: list[dict[str, Any]]
    """The conversation as the template received it (the last reply included)."""
    tools: list[dict[str, Any]] | None
    """The tools the template received (``None``: none; in ``engine`` and text mode they are
    already written into the system prompt)."""
    turns: list[int]
    """Per model turn, the index in ``messages`` of its reply: ``messages[:turns[k]]`` is the
    conversation turn ``k``'s prompt was rendered from."""
    prefills: list[str]
    """Per model turn, the text the engine appended after the generation prompt ('' mostly)."""

    @property
    def first(self) -> int:
        """Index of the first model reply (``len(messages)`` when there is none)."""
        return self.turns[0] if self.turns else len(self.messages)

    def prompt(self) -> list[dict[str, Any]]:
        """The messages before the first model reply."""
        return [dict(m) for m in self.messages[: self.first]]

    def completion(self) -> list[dict[str, Any]]:
        """The first model reply and everything after it."""
        return [dict(m) for m in self.messages[self.first :]]

    def tools_json(self) -> str | None:
        """``tools`` as JSON text (the exported ``tools`` column), ``None`` when there are none."""
        return json.dumps(self.tools, ensure_ascii=False) if self.tools else None


def view_kind(agent: AgentSpec) -> ViewKind:
    """``engine`` for the embedded model's runs (its engine rewrote tools into the messages)."""
    from envlab.models.weights import SMOLLM2_MODEL_ID

    return "engine" if agent.model_id == SMOLLM2_MODEL_ID else "template"


def request_tools(traj: Trajectory) -> list[dict[str, Any]] | None:
    """The tools the model's requests carried: ``None`` in the harness's text mode (they are
    in the system prompt) and for an agent without tools."""
    if traj.agent.harness.startswith("tool-calling/text") or not traj.tools:
        return None
    return traj.tools


def tool_choices(traj: Trajectory, n_turns: int) -> list[str | None]:
    """Each turn's ``tool_choice``, from the agent spec (``required`` for the first N turns)."""
    if request_tools(traj) is None:
        return [None] * n_turns
    m = _REQUIRED.search(str(traj.agent.sampling.get("tool_choice") or ""))
    required = int(m.group(1)) if m else 0
    return ["required" if k < required else None for k in range(n_turns)]


def model_turns(traj: Trajectory) -> list[int]:
    """The message index of every model reply, in order."""
    return [s.message_index for s in traj.steps if s.message_index is not None]


def model_view(traj: Trajectory, kind: ViewKind | None = None) -> ModelView:
    """``traj``'s view (``kind``: the run's, from its agent, unless given)."""
    kind = kind or view_kind(traj.agent)
    turns = model_turns(traj)
    tools = request_tools(traj)
    if kind == "template":
        msgs = [dict(m) for m in traj.messages]
        return ModelView(kind, msgs, tools, turns, [""] * len(turns))
    from envlab.models.prompt import hermes_messages, tool_choice_prefill
    from envlab.models.wire import ChatMessage

    wire = [ChatMessage.model_validate(m) for m in traj.messages]
    plain: list[dict[str, Any]] = [dict(m) for m in hermes_messages(wire, tools)]
    shift = len(plain) - len(wire)  # 1 when the tools block became a system message of its own
    prefills = [tool_choice_prefill(tools, c) for c in tool_choices(traj, len(turns))]
    return ModelView(kind, plain, None, [i + shift for i in turns], prefills)
