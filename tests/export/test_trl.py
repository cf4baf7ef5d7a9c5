"""The exports train: one SFT step and one DPO step of TRL on a tiny, randomly initialised Llama
built here, with the run's own tokenizer, from the exported files (loaded with ``datasets``).
No hub: nothing is downloaded (HF_HUB_OFFLINE)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from envlab.export import ExportOptions, export_run
from envlab.runs import RunDir

pytest.importorskip("trl", reason="the training tests need the extra envlab[train]")


def tiny_llama(tok: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def common(tmp_path: Path) -> dict[str, Any]:
    return dict(
        output_dir=str(tmp_path / "out"), max_steps=1, per_device_train_batch_size=2,
        learning_rate=1e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
        bf16=False, fp16=False, dataloader_num_workers=0, seed=0,
    )  # fmt: skip


def trained(trainer: Any, model: Any) -> float:
    """Run the step; the loss it logged (the weights changed)."""
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 1
    changed = any(
        not (a == p.detach()).all() for a, p in zip(before, model.parameters(), strict=True)
    )
    assert changed, "one optimizer step left every weight as it was"
    (loss,) = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return float(loss)


def test_one_sft_step_on_the_sft_export(run: RunDir, tok: Any, tmp_path: Path) -> None:
    from datasets import load_dataset
    from trl import SFTConfig, SFTTrainer

    out = tmp_path / "sft.parquet"
    n = export_run(run, out, ExportOptions(format="sft", best_per_group=False)).n_rows
    ds = load_dataset("parquet", data_files=str(out), split="train")
    assert len(ds) == n == 5 and "tools" in ds.column_names
    model = tiny_llama(tok)
    args = SFTConfig(**common(tmp_path), max_length=256)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=tok)
    # TRL rendered the conversation with the tools the requests carried (a JSON string)
    first = tok.decode(trainer.train_dataset[0]["input_ids"])
    assert first.startswith('<|im_start|>system\nTools: [{"type": "function"')
    assert "<tool_call>add" in first
    assert math.isfinite(trained(trainer, model))


def test_one_dpo_step_on_the_dpo_export(run: RunDir, tok: Any, tmp_path: Path) -> None:
    from datasets import load_dataset
    from trl import DPOConfig, DPOTrainer

    out = tmp_path / "dpo.jsonl"
    n = export_run(run, out, ExportOptions(format="dpo", min_margin=0.25)).n_rows
    ds = load_dataset("json", data_files=str(out), split="train")
    assert len(ds) == n == 2
    model = tiny_llama(tok)
    args = DPOConfig(**common(tmp_path), max_length=256)
    ref = tiny_llama(tok)  # the same seed: the policy's own starting point, built here too
    trainer = DPOTrainer(model, ref, args=args, train_dataset=ds, processing_class=tok)
    row = trainer.train_dataset[0]
    assert tok.decode(row["chosen_ids"]).endswith("2<|im_end|>\n")
    assert "no idea" in tok.decode(row["rejected_ids"])
    assert math.isfinite(trained(trainer, model))


async def test_one_grpo_step_on_the_grpo_export(tok: Any, tmp_path: Path) -> None:
    """GRPOTrainer reads the grpo export as it is (``prompt``; the other columns reach the
    reward functions) and renders each prompt to the ids the model got in the run. A text-mode
    run: the tools are in the system prompt (GRPOTrainer takes tools as Python functions, for
    the whole dataset, not per row)."""
    from datasets import load_dataset
    from trl import GRPOConfig, GRPOTrainer

    from envlab.agents.model_agents import openai
    from tests.export.served import TokenizerServer, play
    from tests.models.fake_openai import FakeOpenAI

    with FakeOpenAI(respond=TokenizerServer(tok)) as fake:
        agent = openai(f"tiny@{fake.base_url}", logprobs=True, tool_mode="text", max_time_s=1e9)
        run = await play(agent, tmp_path / "run")
    recorded = {tuple(t.tokens.prompt_ids) for t in run.trajectories()}  # type: ignore[union-attr]
    out = tmp_path / "grpo.parquet"
    export_run(run, out, ExportOptions(format="grpo"))
    ds = load_dataset("parquet", data_files=str(out), split="train")
    seen: list[list[int]] = []

    def recorded_reward(completions: list[Any], reward: list[float], **_: Any) -> list[float]:
        # the row's own reward column, and a spread so the step has an advantage
        return [r + i % 2 for i, r in enumerate(reward)]

    args = GRPOConfig(
        **common(tmp_path), num_generations=2, max_completion_length=4, temperature=1.0
    )
    model = tiny_llama(tok)
    trainer = GRPOTrainer(
        model=model, reward_funcs=[recorded_reward], args=args, train_dataset=ds,
        processing_class=tok,
    )  # fmt: skip
    generate = trainer._generate_single_turn  # what TRL samples after: its prompt ids

    def spy(prompt_ids: list[list[int]], *a: Any, **kw: Any) -> Any:
        seen.extend(list(p) for p in prompt_ids)
        return generate(prompt_ids, *a, **kw)

    trainer._generate_single_turn = spy  # type: ignore[method-assign]
    assert math.isfinite(trained(trainer, model))
    assert seen and all(tuple(p) in recorded for p in seen)
