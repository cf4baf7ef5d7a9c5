"""The trainer's model as an envlab agent: each turn's prompt extends the last turn's ids as
generated (no re-tokenization of the model's text), logprobs one per completion token."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("transformers")

from envlab.train.policy import TransformersPolicy


def test_next_turn_extends_the_ids_as_generated(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    policy = TransformersPolicy(model, tok, name="tiny", max_tokens=8)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the tools."},
        {"role": "user", "content": "Compute 2 + 3."},
    ]
    first = asyncio.run(policy.chat(messages))
    assert (
        first.prompt_ids
        == tok(
            tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )["input_ids"]
    )
    assert first.completion_ids and len(first.logprobs or []) == len(first.completion_ids)
    assert all(lp <= 0.0 for lp in first.logprobs or [])
    messages += [
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "<tool_response>\n5\n</tool_response>"},
    ]
    second = asyncio.run(policy.chat(messages))
    done = first.prompt_ids + first.completion_ids
    if done[-1] != tok.eos_token_id:  # cut at max_tokens: the turn is closed for the model
        done.append(tok.eos_token_id)
    assert second.prompt_ids[: len(done)] == done
    tail = tok.decode(second.prompt_ids[len(done) :])
    turn = "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n"
    assert tail == "\n" + turn + "<|im_start|>assistant\n"


def test_a_conversation_that_does_not_extend_is_rendered_whole(tiny: tuple[Any, Any]) -> None:
    model, tok = tiny
    policy = TransformersPolicy(model, tok, name="tiny", max_tokens=4)
    asyncio.run(policy.chat([{"role": "user", "content": "a"}]))
    other = [{"role": "user", "content": "b"}]
    reply = asyncio.run(policy.chat(other))
    rendered = tok.apply_chat_template(other, tokenize=False, add_generation_prompt=True)
    assert reply.prompt_ids == tok(rendered, add_special_tokens=False)["input_ids"]
