"""Reading tool calls out of model text, and writing them Hermes-style.

A call's ``arguments`` are the JSON text as the model wrote it (decoded once, later, by the
environment), never a decoded dict.
"""

from __future__ import annotations

import json

from envlab.models.prompt import ChatTemplate, tool_choice_prefill
from envlab.models.toolcalls import (
    parse_hermes,
    parse_tool_calls,
    render_tool_call,
    render_tools_prompt,
)
from envlab.models.wire import ChatMessage, FunctionCall, WireToolCall

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
    },
}


def test_hermes_blocks_and_text_around_them() -> None:
    text = 'I will add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>\n'
    parsed = parse_tool_calls(text)
    assert parsed.content == "I will add."
    assert [(c.name, c.arguments, c.format) for c in parsed.calls] == [
        ("add", '{"a": 1}', "hermes")
    ]


def test_several_calls_list_and_unclosed_block() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>[{"name": "b", "parameters": {"x": 1}}, {"name": "c"}]</tool_call>'
        '<tool_call>{"name": "d", "arguments": {"y": 2}}'
    )
    calls = parse_tool_calls(text).calls
    assert [(c.name, c.arguments) for c in calls] == [
        ("a", "{}"),
        ("b", '{"x": 1}'),
        ("c", "{}"),
        ("d", '{"y": 2}'),
    ]


def test_broken_json_keeps_the_raw_text_as_arguments() -> None:
    (call,) = parse_tool_calls('<tool_call>{"name": "add", "arguments": {"a": }</tool_call>').calls
    assert call.name == "add" and isinstance(call.arguments, str) and '"a": }' in call.arguments
    (nameless,) = parse_tool_calls("<tool_call>add(1, 2)</tool_call>").calls
    assert nameless.name == "" and nameless.arguments == "add(1, 2)"


def test_strict_mode_leaves_broken_text_alone() -> None:
    text = 'x <tool_call>{"name": "add", "arguments": {"a": }</tool_call>'
    parsed = parse_hermes(text, lenient=False)
    assert parsed.calls == [] and parsed.content == text


def test_fenced_and_bare_json() -> None:
    fenced = parse_tool_calls('Sure:\n```json\n{"name": "add", "arguments": {"a": 1}}\n```\nok')
    assert fenced.calls[0].format == "fenced" and fenced.content == "Sure:\n\nok"
    bare = parse_tool_calls('{"name": "add", "arguments": {"a": 1}}')
    assert bare.calls[0].format == "json" and bare.content == ""
    inline = parse_tool_calls('Call {"name": "add", "arguments": {"a": 1}} now')
    assert inline.calls[0].name == "add" and inline.content == "Call  now"
    openai_shape = parse_tool_calls(
        '{"type": "function", "function": {"name": "add", "arguments": "{\\"a\\": 1}"}}'
    )
    assert openai_shape.calls[0].arguments == '{"a": 1}'
    broken = parse_tool_calls('{"name": "add", "arguments": {"a": 1}')
    assert broken.calls[0].name == "add" and isinstance(broken.calls[0].arguments, str)


def test_arguments_are_the_text_as_written() -> None:
    args = '{"b" :  3,\n "a":1.50, "s": "\\u00e9 \\"}\\""}'
    for text in (
        f'<tool_call>{{"name": "add", "arguments": {args}}}</tool_call>',
        f'```json\n{{"arguments": {args}, "name": "add"}}\n```',
        f'Let me: {{"name": "add", "arguments": {args}}} ok',
        f'[{{"name": "add", "arguments": {args}}}]',
    ):
        (call,) = parse_tool_calls(text).calls
        assert call.arguments == args, text
        assert json.loads(call.arguments) == {"b": 3, "a": 1.5, "s": 'é "}"'}
    # not an object: the text goes on as written, for the environment to say what is wrong
    (listed,) = parse_tool_calls(
        '<tool_call>{"name": "add", "arguments": [1, 2]}</tool_call>'
    ).calls
    assert listed.arguments == "[1, 2]"
    wrapped = parse_tool_calls(
        '{"type": "function", "function": {"name": "add", "arguments": {"a":1}}}'
    )
    assert wrapped.calls[0].name == "add" and wrapped.calls[0].arguments == '{"a":1}'


def test_plain_answers_are_not_calls() -> None:
    for text in ("42", "The answer is 42.", '{"answer": 42}', "```\nprint(1)\n```", ""):
        parsed = parse_tool_calls(text)
        assert parsed.calls == [] and parsed.content == text


def test_render_round_trip() -> None:
    text = render_tool_call("add", '{"a": 1}')
    assert text == '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    assert parse_tool_calls(text).calls[0].arguments == '{"a": 1}'
    # text arguments render as written: a model's own call comes back as it wrote it
    odd = '{ "b":3,"a" :1.50 }'
    assert render_tool_call("add", odd) == (
        f'<tool_call>\n{{"name": "add", "arguments": {odd}}}\n</tool_call>'
    )
    assert parse_tool_calls(render_tool_call("add", odd)).calls[0].arguments == odd
    prompt = render_tools_prompt([ADD])
    assert "<tools>\n" + json.dumps(ADD) in prompt
    assert '{"name": "add", "arguments": {"a": 2}}' in prompt  # the example call


def test_template_writes_tools_calls_and_results() -> None:
    tpl = ChatTemplate(None)  # ChatML
    msgs = [
        ChatMessage(role="system", content="Be brief."),
        ChatMessage(role="user", content="2+3?"),
        ChatMessage(
            role="assistant",
            content="",
            tool_calls=[WireToolCall(function=FunctionCall(name="add", arguments='{"a": 2}'))],
        ),
        ChatMessage(role="tool", content="5", tool_call_id="c"),
    ]
    out = tpl.render(msgs, [ADD], "required")
    assert out.text.startswith("<|im_start|>system\nBe brief.\n\n# Tools")
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 2}}' in out.text
    assert "<|im_start|>tool\n<tool_response>\n5\n</tool_response><|im_end|>" in out.text
    assert out.text.endswith('<|im_start|>assistant\n<tool_call>\n{"name": "')
    assert out.prefill == '<tool_call>\n{"name": "'
    assert "# Tools" not in tpl.render(msgs, [ADD], "none").text
    named = {"type": "function", "function": {"name": "add"}}
    assert tool_choice_prefill([ADD], named).endswith('{"name": "add", "arguments": ')
