"""The re-render guarantee, on real runs: every exported row, re-rendered the way a trainer does
it with the model's *stock* chat template (``apply_chat_template(prompt, tools=tools,
add_generation_prompt=True)``, tokenized), gives exactly the prompt ids the model got, at every
model turn; and the rows as they were exported before (the harness's request messages and
tools) do not, for the embedded engine's runs.

Two players: a tokenizer-backed server (``served.TokenizerServer``: vLLM's part, rendering the
requests with the run's tokenizer; native and text tool modes), and the embedded SmolLM2
(native mode, whose engine writes the tools into the messages and prefills the forced first
call; text mode), re-rendered with SmolLM2's stock tokenizer and template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envlab.export import ExportOptions, TokenizerRenderer, check_run, export_run, renderer_for
from envlab.export.views import request_tools
from envlab.runs import RunDir
from tests.export.served import TokenizerServer, play, smollm2_stock_tokenizer


def stock_ids(tok: Any, messages: list[dict[str, Any]], tools: str | None) -> list[int]:
    """What a trainer gets: the stock template over the row's messages and tools, tokenized."""
    out = tok.apply_chat_template(
        messages, tools=json.loads(tools) if tools else None, add_generation_prompt=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def stock_text(tok: Any, messages: list[dict[str, Any]], tools: str | None) -> str:
    tools_list = json.loads(tools) if tools else None
    return str(
        tok.apply_chat_template(
            messages, tools=tools_list, add_generation_prompt=True, tokenize=False
        )
    )


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def assert_tokens_rows_rerender(tok: Any, got: list[dict[str, Any]]) -> None:
    """Turn 0 re-renders to ``prompt_ids``; turn k (its conversation: ``prompt`` and the
    ``completion`` messages before the k-th reply) to the ids before ``turn_starts[k]``."""
    for r in got:
        conv, tools, full = (
            r["prompt"] + r["completion"],
            r["tools"],
            r["prompt_ids"] + r["completion_ids"],
        )
        assert stock_ids(tok, r["prompt"], tools) == r["prompt_ids"], r["episode_id"]
        assert stock_text(tok, r["prompt"], tools) == r["prompt_text"]
        replies = [i for i, m in enumerate(conv) if m["role"] == "assistant"]
        assert len(replies) == len(r["turn_starts"]) >= 1
        for k in range(1, len(replies)):
            assert stock_ids(tok, conv[: replies[k]], tools) == full[: r["turn_starts"][k]]
        prefill = slice(len(r["prompt_ids"]), r["turn_starts"][0])  # the model did not sample it
        assert set(r["loss_mask"][: prefill.stop - prefill.start]) <= {0}
        assert r["response_length"] == len(r["completion_ids"]) == len(r["loss_mask"])


def export_all(run: RunDir, tmp: Path, renderer: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for fmt, opts in (
        ("tokens", {}),
        ("grpo", {}),
        ("sft", {"min_reward": 0.0, "best_per_group": False}),
    ):
        path = tmp / f"{fmt}.jsonl"
        export_run(run, path, ExportOptions(format=fmt, **opts), renderer)  # type: ignore[arg-type]
        out[fmt] = rows(path)
    return out


def assert_every_row_rerenders(tok: Any, got: dict[str, list[dict[str, Any]]]) -> None:
    assert_tokens_rows_rerender(tok, got["tokens"])
    by_id = {r["episode_id"]: r for r in got["tokens"]}
    assert {r["episode_id"] for r in got["grpo"]} == set(by_id)
    for r in got["grpo"]:  # the same prompt, text and tools as the tokens row
        t = by_id[r["episode_id"]]
        assert (r["prompt"], r["completion"], r["tools"]) == (
            t["prompt"],
            t["completion"],
            t["tools"],
        )
        assert stock_ids(tok, r["prompt"], r["tools"]) == t["prompt_ids"]
        assert r["prompt_text"] == t["prompt_text"]
    for r in got["sft"]:  # the whole conversation, every turn
        t = by_id[r["episode_id"]]
        assert r["messages"] == t["prompt"] + t["completion"] and r["tools"] == t["tools"]


@pytest.mark.parametrize("mode", ["native", "text"])
async def test_rows_of_a_served_run_rerender_with_the_stock_template(
    mode: str, tok: Any, tokenizer_dir: Path, tmp_path: Path
) -> None:
    from envlab.agents.model_agents import openai
    from tests.models.fake_openai import FakeOpenAI

    with FakeOpenAI(respond=TokenizerServer(tok)) as fake:
        agent = openai(f"tiny@{fake.base_url}", logprobs=True, tool_mode=mode, max_time_s=1e9)  # type: ignore[arg-type]
        run = await play(agent, tmp_path / "run")
    trajs = list(run.trajectories())
    assert len(trajs) == 4 and all(t.scored and t.tokens is not None for t in trajs)
    assert all(len(t.tokens.turn_starts) == 2 for t in trajs)  # type: ignore[union-attr]
    assert len({t.reward for t in trajs}) > 1  # right and wrong answers
    got = export_all(run, tmp_path, renderer_for(run, str(tokenizer_dir)))
    assert_every_row_rerenders(tok, got)
    tools = {r["tools"] for r in got["tokens"]}
    assert tools == ({json.dumps(trajs[0].tools)} if mode == "native" else {None})
    if mode == "text":  # the harness's tools block and instructions are in the system prompt
        system = got["tokens"][0]["prompt"][0]["content"]
        assert "<tools>" in system and "Use the tools when they help" in system


@pytest.fixture(scope="module")
def smollm2_tok() -> Any:
    pytest.importorskip("llama_cpp", reason="the embedded model needs the extra envlab[local]")
    pytest.importorskip("gguf", reason="the stock tokenizer is read from the GGUF by transformers")
    return smollm2_stock_tokenizer()


@pytest.mark.parametrize("mode", ["native", "text"])
async def test_rows_of_a_smollm2_run_rerender_with_its_stock_template(
    mode: str, smollm2_tok: Any, tmp_path: Path
) -> None:
    from envlab.agents.model_agents import smollm2

    factory = smollm2(temperature=0.0, max_tokens=48, max_time_s=1e9, max_turns=2, tool_mode=mode)  # type: ignore[arg-type]
    run = await play(factory, tmp_path / "run", tasks=2, samples=1)
    trajs = [t for t in run.trajectories() if t.scored and t.tokens is not None]
    assert len(trajs) == 2
    got = export_all(run, tmp_path, renderer_for(run, None))
    assert_every_row_rerenders(smollm2_tok, got)
    if mode == "native":  # the forced call, its result, then a second turn
        for r in got["tokens"]:
            assert len(r["turn_starts"]) == 2
            # the engine's prefill of the forced call starts the completion, unsampled
            prefill = r["completion_ids"][: r["turn_starts"][0] - len(r["prompt_ids"])]
            assert smollm2_tok.decode(prefill) == '<tool_call>\n{"name": "'
            assert r["completion"][0]["content"].startswith('<tool_call>\n{"name": "')
    assert all(r["tools"] is None for r in got["tokens"])  # in the system prompt: no `tools`
    assert all("<tools>" in r["prompt"][0]["content"] for r in got["tokens"])
    # the check, with the stock tokenizer as --tokenizer DIR: no drift either
    assert check_run(run, TokenizerRenderer(smollm2_tok, "stock")).drifts == []
    if mode == "native":  # the rows as exported before: the request, not what the engine rendered
        for t in trajs:
            first = next(i for i, m in enumerate(t.messages) if m["role"] == "assistant")
            old_tools = json.dumps(request_tools(t))
            assert t.tokens is not None
            assert stock_ids(smollm2_tok, t.messages[:first], old_tools) != t.tokens.turn_prompt(0)
