"""Real runs for the re-render tests: episodes of ``calc`` played through envlab's tool-calling
harness against a tokenizer-backed server, and by the embedded SmolLM2.

``TokenizerServer`` plays vLLM's part over a real HTTP connection (``tests.models.fake_openai``):
it renders each request with the tokenizer's chat template (``apply_chat_template(messages,
tools=tools, add_generation_prompt=True)``), returns those ``prompt_token_ids``, and replies
with a tool call on the first turn and an answer after the tool's result (right or wrong by
the request's seed, so groups have reward variance), each reply's ``token_ids`` being what the
template writes for it up to its end-of-turn token, as a model that wrote it would have
sampled. With tools in the request (the harness's native mode) the call comes back as
``tool_calls``, which the harness sends back as the server returned them; without (text mode:
the tools are in the system prompt) it is Hermes text the harness parses.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from envlab.core import Limits
from envlab.runs import RunDir
from tests.models.fake_openai import Scripted, completion

_EXPR = re.compile(r"Compute (.+?) using")


def _answer(messages: list[dict[str, Any]], right: bool) -> str:
    if not right:
        return "no idea"
    user = next(m["content"] for m in messages if m["role"] == "user")
    expr = _EXPR.search(user)
    assert expr is not None and set(expr.group(1)) <= set("0123456789+-*/() ."), user
    value = eval(expr.group(1))  # digits and operators only, checked above
    return str(int(value) if float(value).is_integer() else value)


class TokenizerServer:
    """``FakeOpenAI(respond=TokenizerServer(tok))``: chat completions rendered by ``tok``."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.end = tok.convert_tokens_to_ids("<|im_end|>")

    def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        text = self.tok.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=False
        )
        return list(self.tok.encode(text, add_special_tokens=False))

    def __call__(self, body: dict[str, Any]) -> Scripted:
        messages, tools = body["messages"], body.get("tools")
        prompt = self.render(messages, tools)
        calls: list[tuple[str, str]] | None = None
        if not any(m["role"] == "assistant" for m in messages):  # the first turn: a tool call
            args = json.dumps({"a": 2, "b": 3})
            if tools:
                fn = {"name": "add", "arguments": args}
                call = {"id": "call_0", "type": "function", "function": fn}
                reply: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": [call]}
                calls = [("add", args)]
            else:
                text = f'<tool_call>\n{{"name": "add", "arguments": {args}}}\n</tool_call>'
                reply = {"role": "assistant", "content": text}
        else:
            content = _answer(messages, right=int(body.get("seed") or 0) % 2 == 0)
            reply = {"role": "assistant", "content": content}
        with_reply = self.render([*messages, reply], tools)
        assert with_reply[: len(prompt)] == prompt, "the template does not extend the prompt"
        ids = with_reply[len(prompt) : with_reply.index(self.end, len(prompt)) + 1]
        text = None if calls else reply["content"]
        return completion(
            text, tool_calls=calls, prompt_ids=prompt, token_ids=ids, logprobs=[-0.5] * len(ids)
        )


async def play(factory: Any, out: Path, *, tasks: int = 2, samples: int = 2) -> RunDir:
    """``tasks x samples`` episodes of ``calc`` by ``factory``'s agent, into the run ``out``."""
    from envlab.envs.calc import CalcEnv
    from envlab.rollout import EpisodeConfig, rollout

    untimed = EpisodeConfig(overrides=Limits.overrides(step_timeout_s=1e9, episode_timeout_s=1e9))
    spec = CalcEnv()
    try:
        await rollout(
            spec, factory, spec.tasks(n=tasks), out_dir=out, samples=samples, config=untimed
        )
    finally:
        await factory.aclose()
    return RunDir(out)


def smollm2_stock_tokenizer() -> Any:
    """SmolLM2-135M-Instruct's tokenizer with its stock chat template, as a trainer loads it:
    from the embedded GGUF (its vocabulary, merges and ``tokenizer.chat_template``) with the
    model's own pre-tokenizer (digits one by one, then GPT-2's byte-level split)."""
    from transformers import AutoTokenizer

    from envlab.models.torch_engine import PRE_TOKENIZERS
    from envlab.models.weights import smollm2_path

    path = smollm2_path()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    tok.backend_tokenizer.pre_tokenizer = PRE_TOKENIZERS["smollm"]()
    return tok
