"""What every local engine reports (llama.cpp, torch: each one installed), with the real embedded
model: token ids, logprobs, seeds and tool calls, never the words the model writes.

Token ids are what trainers consume, so both engines must give the tokenizer's own ids: the
last tests compare them (when both are installed) and check a run made on torch against the
other engine's rendering, through the CLI.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError
from envlab.envs.calc import CalcEnv
from envlab.models.engine import Engine
from envlab.models.local import ENGINE_ENV, engine_backend, shared_engine
from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path
from envlab.models.wire import ChatMessage, ChatRequest, ChatResponse
from tests.conftest import subprocess_env
from tests.models.conftest import installed

COUNT = [ChatMessage(role="user", content="Count from 1 to 1000, separated by commas.")]
POEM = [ChatMessage(role="user", content="Write a short poem about the sea.")]
ADD_TOOL = CalcEnv().new_episode().tools[0].to_openai()


def chat(engine: Engine, messages: list[ChatMessage] = COUNT, **kw: Any) -> ChatResponse:
    return engine.chat(ChatRequest(messages=messages, **kw))


def pieces(engine: Engine, ids: list[int]) -> bytes:
    return b"".join(engine.piece(t) for t in ids)


def test_token_ids_are_the_tokenizers_own_and_round_trip(engine: Engine) -> None:
    r = chat(engine, max_tokens=12, temperature=0, ignore_eos=True)
    rendered = engine.template.render(COUNT).text
    assert r.prompt_token_ids == engine.tokenize(rendered)
    assert pieces(engine, r.prompt_token_ids).decode() == rendered
    (choice,) = r.choices
    ids = choice.token_ids or []
    assert len(ids) == 12 and all(0 <= t < engine.n_vocab for t in ids)
    assert choice.message.content == pieces(engine, ids).decode("utf-8", errors="replace")
    assert engine.recent[-1].ids == ids


def test_logprobs_are_finite_log_probabilities(engine: Engine) -> None:
    r = chat(engine, POEM, max_tokens=16, temperature=1.0, seed=3, logprobs=True, top_logprobs=5)
    (choice,) = r.choices
    ids = choice.token_ids or []
    content = choice.logprobs.content if choice.logprobs else []
    assert r.usage is not None and len(content) == len(ids) == r.usage.completion_tokens > 0
    assert [lp.logprob for lp in content] == engine.recent[-1].logprobs
    for token, lp in zip(ids, content, strict=True):
        assert math.isfinite(lp.logprob) and lp.logprob <= 0.0
        assert bytes(lp.bytes or []) == engine.piece(token)
        top = [t.logprob for t in lp.top_logprobs]
        assert len(top) == 5 and top == sorted(top, reverse=True)
        assert all(math.isfinite(t) and t <= 0.0 for t in top)
        assert sum(math.exp(t) for t in top) <= 1.0 + 1e-6
        assert lp.logprob <= top[0] + 1e-9


def test_the_same_seed_draws_the_same_tokens(engine: Engine) -> None:
    def ids(**kw: Any) -> list[int]:
        return chat(engine, POEM, max_tokens=16, ignore_eos=True, **kw).choices[0].token_ids or []

    sampled = {"temperature": 1.0, "top_p": 0.9}
    assert ids(seed=1234, **sampled) == ids(seed=1234, **sampled)
    assert len({tuple(ids(seed=s, **sampled)) for s in range(4)}) > 1, "the seed is ignored"
    assert ids(temperature=0) == ids(temperature=0, seed=99)  # greedy: no draw at all


def test_a_request_with_tools_is_answered_with_parsed_tool_calls(engine: Engine) -> None:
    request = ChatRequest(
        messages=[ChatMessage(role="user", content="Add 2 and 3.")],
        tools=[ADD_TOOL],
        tool_choice={"type": "function", "function": {"name": "add"}},
        parallel_tool_calls=False,
        temperature=0,
        max_tokens=40,
    )
    rendered = engine.template.render(request.messages, request.tools, request.tool_choice)
    assert (
        "<tools>" in rendered.text and rendered.prefill and rendered.text.endswith('"arguments": ')
    )
    r = engine.chat(request)
    assert r.prompt_token_ids == engine.tokenize(rendered.text)
    (choice,) = r.choices
    assert choice.finish_reason == "tool_calls", choice
    (call,) = choice.message.tool_calls or []
    assert call.function.name == "add" and call.id.startswith("call_")
    assert engine.recent[-1].finish_reason in ("stop", "length")


def test_the_engine_is_chosen_by_env_or_by_what_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENGINE_ENV, " Torch ")
    assert engine_backend() == "torch"
    monkeypatch.setenv(ENGINE_ENV, "vllm")
    with pytest.raises(ConfigError, match="use one of: llamacpp, torch"):
        engine_backend()
    monkeypatch.delenv(ENGINE_ENV)
    if installed("llamacpp") or installed("torch"):
        assert engine_backend() == ("llamacpp" if installed("llamacpp") else "torch")


BOTH = pytest.mark.skipif(
    not (installed("llamacpp") and installed("torch")), reason="needs both engines"
)


@BOTH
def test_both_engines_give_the_same_token_ids() -> None:
    llama, torch = (
        shared_engine(smollm2_path(), backend=b, model_id=SMOLLM2_MODEL_ID)
        for b in ("llamacpp", "torch")
    )
    assert llama.n_vocab == torch.n_vocab and llama.template.source == torch.template.source
    assert [llama.piece(t) for t in range(llama.n_vocab)] == [
        torch.piece(t) for t in range(torch.n_vocab)
    ]
    tools = [t.to_openai() for t in CalcEnv().new_episode().tools]
    texts = [
        llama.template.render(COUNT + POEM, tools, "required").text,
        "  1, 22,  333 and 4444.5 x  = 12345678",
        "def f(x):\n\n        return   x  *  2\t\t# done\r\n",
        "héllo wörld ñ 日本語 🤖 👍🏽 don't I'LL we've",
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
    ]
    rng = random.Random(0)
    alphabet = "abc XYZ 0123 \n\t.,;:!?'\"-_()[]{}<>|/\\ éü日本🤖"
    texts += ["".join(rng.choices(alphabet, k=rng.randint(1, 80))) for _ in range(300)]
    for text in texts:
        assert llama.tokenize(text) == torch.tokenize(text), text


@pytest.mark.skipif(not installed("torch"), reason="the torch engine is missing")
def test_eval_with_the_torch_engine_keeps_token_exact_trajectories(tmp_path: Path) -> None:
    """``envlab eval calc --agent smollm2`` on torch; its token view re-renders exactly with the
    other engine's tokenizer when llama.cpp is installed (else with torch's own)."""
    out = tmp_path / "run"
    cli = [sys.executable, "-m", "envlab.cli.main"]
    r = subprocess.run(
        [*cli, "eval", "calc", "--agent", "smollm2", "--tasks", "1", "--out", str(out), "--json"],
        capture_output=True,
        text=True,
        env={**subprocess_env(), ENGINE_ENV: "torch"},
        timeout=280,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["n_episodes"] == 1 and summary["n_scored"] == 1, summary
    run = json.loads((out / "run.json").read_text())
    assert run["agent"]["endpoint"].endswith("(torch engine)")
    (line,) = (out / "trajectories.jsonl").read_text().splitlines()
    tokens = json.loads(line)["tokens"]
    assert tokens["completion_ids"] and len(tokens["logprobs"]) == len(tokens["completion_ids"])
    assert all(math.isfinite(lp) and lp <= 0.0 for lp in tokens["logprobs"])
    checker = "llamacpp" if installed("llamacpp") else "torch"
    r = subprocess.run(
        [*cli, "export", str(out), "--check", "--json"],
        capture_output=True,
        text=True,
        env={**subprocess_env(), ENGINE_ENV: checker},
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    check = json.loads(r.stdout)
    assert check["n_checked"] == 1 and check["n_drifted"] == 0, check
