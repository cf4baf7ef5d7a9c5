"""From chat messages and tools to the prompt text a local model reads.

The model's own chat template (from the GGUF file) lays out the turns; tools, tool calls and tool
results are written into the messages first, Hermes-style, because small chat templates know
nothing of tools:

- the tools go at the end of the system prompt (``<tools>...</tools>``, see ``toolcalls``);
- an assistant message's ``tool_calls`` become ``<tool_call>{json}</tool_call>`` blocks after its
  text, in the format the model is asked to write, with each call's arguments text as it is
  (not re-encoded: the model's own call comes back as it wrote it, as Qwen's and vLLM's Hermes
  templates do);
- a ``tool`` message becomes ``<tool_response>...</tool_response>`` in a ``tool`` turn.

``tool_choice`` is honoured by a prefill of the assistant turn: ``"required"`` starts it with
``<tool_call>\\n{"name": "``, a named function with that name too; the model writes the rest.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envlab.core import ConfigError
from envlab.models.toolcalls import (
    TOOL_CALL_OPEN,
    render_tool_call,
    render_tool_response,
    render_tools_prompt,
)
from envlab.models.wire import ChatMessage

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""The template used when a model file carries none."""


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    text: str
    """The whole prompt, ending with the prefill (if any)."""
    prefill: str
    """Text the assistant turn starts with; part of the reply's text, not generated."""


class ChatTemplate:
    """A Jinja chat template (sandboxed), plus the Hermes rewriting of tools."""

    def __init__(self, source: str | None) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=False)
        self.source = source or CHATML
        self._template = env.from_string(self.source)

    def render(
        self,
        messages: list[ChatMessage],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | dict[str, Any] | None = None,
    ) -> RenderedPrompt:
        plain = hermes_messages(messages, tools if tool_choice != "none" else None)
        text = self._template.render(messages=plain, add_generation_prompt=True)
        prefill = tool_choice_prefill(tools, tool_choice)
        return RenderedPrompt(text + prefill, prefill)


def hermes_messages(
    messages: list[ChatMessage], tools: list[dict[str, Any]] | None
) -> list[dict[str, str]]:
    """Messages as ``{"role", "content"}`` text, with tools and tool traffic written in."""
    out: list[dict[str, str]] = []
    for m in messages:
        if m.role in ("system", "developer"):
            out.append({"role": "system", "content": m.text()})
        elif m.role == "assistant":
            parts = [m.text()] if m.text() else []
            for call in m.tool_calls or []:
                parts.append(render_tool_call(call.function.name, call.function.arguments))
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif m.role == "tool":
            out.append({"role": "tool", "content": render_tool_response(m.text())})
        elif m.role == "user":
            out.append({"role": "user", "content": m.text()})
        else:
            raise ConfigError(
                f"unknown message role {m.role!r}; use system, user, assistant or tool"
            )
    if tools:
        block = render_tools_prompt(tools)
        if out and out[0]["role"] == "system":
            sys_text = out[0]["content"]
            out[0] = {"role": "system", "content": f"{sys_text}\n\n{block}" if sys_text else block}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def tool_choice_prefill(
    tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None
) -> str:
    """The start of the assistant turn that forces a tool call, or ``""``."""
    if not tools or tool_choice in (None, "auto", "none"):
        return ""
    if tool_choice == "required":
        return f'{TOOL_CALL_OPEN}\n{{"name": "'
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        known = {(t.get("function") or t).get("name") for t in tools}
        if name not in known:
            raise ConfigError(
                f"tool_choice names function {name!r}, which is not among the tools "
                f"({', '.join(sorted(str(k) for k in known))})"
            )
        return f'{TOOL_CALL_OPEN}\n{{"name": "{name}", "arguments": '
    raise ConfigError(
        f"tool_choice {tool_choice!r} is not supported; use 'auto', 'none', 'required' or "
        '{"type": "function", "function": {"name": ...}}'
    )
