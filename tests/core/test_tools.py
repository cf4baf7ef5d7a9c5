"""tool_spec: the published schema is pydantic's in plain form (see ``tool_spec``'s docstring)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from envlab.core import ToolCallError
from envlab.core.tools import tool_spec


class Flight(TypedDict):
    """A class docstring documents code: it is not published."""

    flight_number: Annotated[str, Field(description="Flight number, such as 'HAT001'.")]
    date: str


class Payment(BaseModel):
    payment_id: str = Field(description="The payment id.")
    amount: float


def book(
    cabin: Literal["economy", "business"],
    insurance: Literal["yes"],
    flights: list[Flight],
    payment: Payment,
    counts: dict[str, int],
    note: str = "",
) -> str:
    """Book a reservation for the user, a summary that is wrapped
    over two lines.

    A second paragraph.

    Args:
        cabin: The cabin.
        insurance: Whether to insure.
        flights: The flights, a description
            wrapped over lines.
        payment: How it is paid.
        counts: Counts by name.
        note: A note.
    """
    return ""


def _walk(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        return [node, *(d for v in node.values() for d in _walk(v))]
    if isinstance(node, list):
        return [d for v in node for d in _walk(v)]
    return []


def test_nested_models_are_inlined_without_defs_titles_or_closedness() -> None:
    params = tool_spec(book).parameters
    assert params["properties"]["flights"] == {
        "type": "array",
        "description": "The flights, a description wrapped over lines.",
        "items": {
            "type": "object",
            "properties": {
                "flight_number": {
                    "type": "string",
                    "description": "Flight number, such as 'HAT001'.",
                },
                "date": {"type": "string"},
            },
            "required": ["flight_number", "date"],
        },
    }
    assert params["properties"]["payment"] == {
        "type": "object",
        "description": "How it is paid.",
        "properties": {
            "payment_id": {"type": "string", "description": "The payment id."},
            "amount": {"type": "number"},
        },
        "required": ["payment_id", "amount"],
    }
    nodes = _walk(params)
    assert not any({"$defs", "$ref", "title"} & set(n) for n in nodes)
    assert not any(isinstance(n.get("additionalProperties"), bool) for n in nodes)
    # the value type of a dict is a schema, kept
    assert params["properties"]["counts"] == {
        "type": "object",
        "description": "Counts by name.",
        "additionalProperties": {"type": "integer"},
    }


def test_literals_are_enums_and_keys_come_in_the_plain_order() -> None:
    params = tool_spec(book).parameters
    cabin = params["properties"]["cabin"]
    assert cabin == {"type": "string", "enum": ["economy", "business"], "description": "The cabin."}
    assert list(cabin) == ["type", "enum", "description"]
    assert params["properties"]["insurance"]["enum"] == ["yes"]
    assert "const" not in params["properties"]["insurance"]
    assert list(params) == ["type", "properties", "required"]
    assert list(params["properties"]["flights"]) == ["type", "description", "items"]
    assert params["required"] == ["cabin", "insurance", "flights", "payment", "counts"]
    assert params["properties"]["note"] == {
        "type": "string",
        "description": "A note.",
        "default": "",
    }


def test_descriptions_are_unwrapped_and_paragraphs_kept() -> None:
    spec = tool_spec(book)
    assert spec.description == (
        "Book a reservation for the user, a summary that is wrapped over two lines.\n\n"
        "A second paragraph."
    )


def test_extra_arguments_are_still_refused_at_the_top_and_in_typed_dicts() -> None:
    spec = tool_spec(book)
    good = {
        "cabin": "economy",
        "insurance": "yes",
        "flights": [{"flight_number": "HAT001", "date": "2024-05-01"}],
        "payment": {"payment_id": "p", "amount": 1},
        "counts": {},
    }
    assert spec.parse_arguments(good)["flights"] == good["flights"]
    with pytest.raises(ToolCallError, match="'extra': Extra inputs are not permitted"):
        spec.parse_arguments({**good, "extra": 1})
    bad_flight = [{"flight_number": "HAT001", "date": "2024-05-01", "seat": "1A"}]
    with pytest.raises(ToolCallError, match=r"'flights\.0\.seat': Extra inputs"):
        spec.parse_arguments({**good, "flights": bad_flight})
    with pytest.raises(ToolCallError, match="'cabin'"):
        spec.parse_arguments({**good, "cabin": "first"})


def test_a_tool_without_parameters_has_empty_properties_and_required() -> None:
    def ping() -> str:
        """Ping."""
        return "pong"

    assert tool_spec(ping).parameters == {"type": "object", "properties": {}, "required": []}


def test_an_enum_the_tool_checks_itself_is_published_but_not_enforced() -> None:
    def cancel(reason: Annotated[str, Field(json_schema_extra={"enum": ["a", "b"]})]) -> str:
        """Cancel.

        Args:
            reason: Why.
        """
        return reason

    spec = tool_spec(cancel)
    assert spec.parameters["properties"]["reason"] == {
        "type": "string",
        "enum": ["a", "b"],
        "description": "Why.",
    }
    assert spec.parse_arguments({"reason": "other"}) == {"reason": "other"}


class Node(TypedDict):
    children: list[Node]


def test_a_type_that_contains_itself_cannot_be_inlined() -> None:
    def walk(tree: Node) -> str:
        """Walk a tree."""
        return ""

    with pytest.raises(TypeError, match="refers to itself"):
        tool_spec(walk)


def keep(x: Any, tag: str = "") -> str:
    """Keep anything.

    Args:
        x: Any JSON value.
        tag: A label.
    """
    return "kept"


@pytest.mark.parametrize("depth", [500, 990, 100_000])
def test_arguments_nested_too_deep_are_the_agents_malformed_call(depth: int) -> None:
    """Arguments nested past the decoder's depth (or past what copying and recording them
    can take) are a ToolCallError the agent reads, never a RecursionError (env_error); the
    same from a model's text through the tool-call parser."""
    from envlab.core.tools import MAX_ARGUMENT_DEPTH
    from envlab.models.toolcalls import parse_tool_calls

    spec = tool_spec(keep)
    text = '{"x": ' + "[" * depth + "]" * depth + "}"
    with pytest.raises(ToolCallError, match=f"nested more than {MAX_ARGUMENT_DEPTH} levels"):
        spec.parse_arguments(text)
    nested: list[Any] = []
    for _ in range(depth):
        nested = [nested]
    with pytest.raises(ToolCallError, match="nested more than"):
        spec.parse_arguments({"x": nested})  # a scripted agent's dict
    for reply in (f"<tool_call>{{'name': 'keep', 'arguments': {text}}}</tool_call>",
                  f'{{"name": "keep", "arguments": {text}}}'):  # fmt: skip
        [call] = parse_tool_calls(reply.replace("'", '"')).calls
        assert call.name == "keep"
        with pytest.raises(ToolCallError):
            spec.parse_arguments(call.arguments)


def test_arguments_at_the_depth_limit_still_parse() -> None:
    from envlab.core.tools import MAX_ARGUMENT_DEPTH

    inner = MAX_ARGUMENT_DEPTH - 1  # the arguments object is the first level
    text = '{"x": ' + "[" * inner + "]" * inner + ', "tag": "t"}'
    parsed = tool_spec(keep).parse_arguments(text)
    assert parsed["tag"] == "t"
    cyclic: list[Any] = []
    cyclic.append(cyclic)  # a scripted agent's self-referencing list is refused, not looped on
    with pytest.raises(ToolCallError, match="nested more than"):
        tool_spec(keep).parse_arguments({"x": cyclic})
