"""What the engine accepts from ``agent.act()``: a plain ``Action`` whose every part has the type
the engine relies on. Checked in the agent's phase, so that a malformed action is the agent's
failure (``agent_error``), never the environment's or the machinery's."""

from __future__ import annotations

from envlab.core import Action, ToolCall
from envlab.core.text import check_text


def check_action(action: object) -> Action:
    """The action as a plain ``Action`` whose every part has the type the engine relies on;
    ``TypeError`` (raised in the agent's phase: its failure) saying what is wrong otherwise."""
    if not isinstance(action, Action):
        raise TypeError(f"agent.act() must return an Action, got {type(action).__name__}")
    if type(action) is not Action:  # a subclass: read each field once, check the copy
        action = Action(text=action.text, tool_calls=action.tool_calls, info=action.info)
    if not isinstance(action.text, str):
        raise TypeError(f"Action.text must be a str, got {type(action.text).__name__}")
    check_text(action.text, "Action.text")
    if type(action.tool_calls) is not list:
        raise TypeError(
            f"Action.tool_calls must be a list of ToolCall, got {type(action.tool_calls).__name__}"
        )
    for i, call in enumerate(action.tool_calls):
        _check_tool_call(i, call)
    if type(action.info) is not dict:
        raise TypeError(f"Action.info must be a dict, got {type(action.info).__name__}")
    index = action.info.get("message_index")
    if index is not None and (type(index) is not int or index < 0):
        raise TypeError(
            f"Action.info['message_index'] must be a non-negative int or None, got {index!r}"
        )
    return action


def _check_tool_call(i: int, call: object) -> None:
    where = f"Action.tool_calls[{i}]"
    if type(call) is not ToolCall:
        raise TypeError(f"{where} must be a ToolCall, got {type(call).__name__}")
    if type(call.name) is not str:
        raise TypeError(f"{where}.name must be a str, got {type(call.name).__name__}")
    if type(call.arguments) is not str and type(call.arguments) is not dict:
        raise TypeError(
            f"{where}.arguments must be a str (the model's text) or a dict, "
            f"got {type(call.arguments).__name__}"
        )
    if type(call.id) is not str:
        raise TypeError(f"{where}.id must be a str, got {type(call.id).__name__}")
    for part, value in (("name", call.name), ("id", call.id), ("arguments", call.arguments)):
        check_text(value, f"{where}.{part}")
