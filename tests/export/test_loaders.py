"""The exports as each trainer's loader reads them, without glue: TRL's datasets (``datasets``
and TRL's own chat-template code), verl's RL Parquet (pyarrow, and the steps of verl's
``RLHFDataset`` and reward manager), SkyRL's ``GeneratorOutput`` and slime's ``Sample`` (field
names as their sources spell them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envlab.export import (
    SKYRL_FIELDS,
    SLIME_FIELDS,
    VERL_COLUMNS,
    ExportOptions,
    export_run,
    renderer_for,
    skyrl_generator_output,
    slime_sample_fields,
)
from envlab.runs import RunDir
from tests.export.served import TokenizerServer, play

datasets = pytest.importorskip("datasets")


async def served_run(tok: Any, out: Path, mode: str) -> RunDir:
    from envlab.agents.model_agents import openai
    from tests.models.fake_openai import FakeOpenAI

    with FakeOpenAI(respond=TokenizerServer(tok)) as fake:
        agent = openai(f"tiny@{fake.base_url}", logprobs=True, tool_mode=mode, max_time_s=1e9)  # type: ignore[arg-type]
        return await play(agent, out)


def export(run: RunDir, out: Path, fmt: str, renderer: Any = None, **opts: Any) -> Any:
    export_run(run, out, ExportOptions(format=fmt, **opts), renderer)  # type: ignore[arg-type]
    kind = "parquet" if out.suffix == ".parquet" else "json"
    return datasets.load_dataset(kind, data_files=str(out), split="train")


# --- TRL ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["native", "text"])
async def test_trl_renders_the_rows_to_the_models_prompt(
    mode: str, tok: Any, tokenizer_dir: Path, tmp_path: Path
) -> None:
    pytest.importorskip("trl")
    from trl.data_utils import apply_chat_template, is_conversational

    run = await served_run(tok, tmp_path / "run", mode)
    renderer = renderer_for(run, str(tokenizer_dir))
    ids = {t.episode_id: t.tokens.prompt_ids for t in run.trajectories()}  # type: ignore[union-attr]
    for suffix in ("jsonl", "parquet"):
        grpo = export(run, tmp_path / f"grpo.{suffix}", "grpo", renderer)
        sft = export(run, tmp_path / f"sft.{suffix}", "sft", min_reward=0.0)
        assert {"prompt", "completion"} <= set(grpo.column_names)  # GRPOTrainer: prompt
        assert "messages" in sft.column_names  # SFTTrainer: messages (conversational LM)
        for row in grpo:
            assert is_conversational(row)
            tools = json.loads(row["tools"]) if row["tools"] else None
            example = {"prompt": row["prompt"], "completion": row["completion"]}
            prompt = apply_chat_template(example, tok, tools=tools)["prompt"]  # TRL's own render
            assert prompt == row["prompt_text"]
            assert tok.encode(prompt, add_special_tokens=False) == ids[row["episode_id"]]
        texts = {r["episode_id"]: r["prompt_text"] for r in grpo}
        for row in sft:  # the whole conversation, which starts with the first turn's prompt
            tools = json.loads(row["tools"]) if row["tools"] else None
            text = apply_chat_template({"messages": row["messages"]}, tok, tools=tools)["text"]
            assert text.startswith(texts[row["episode_id"]])


# --- verl ---------------------------------------------------------------------------------------


def test_verl_parquet_has_verls_columns(run: RunDir, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = tmp_path / "verl.parquet"
    report = export_run(run, out, ExportOptions(format="verl"))
    table = pq.read_table(out)
    assert tuple(table.column_names) == VERL_COLUMNS and report.n_rows == table.num_rows == 4
    schema = table.schema
    prompt = schema.field("prompt").type
    assert pa.types.is_list(prompt) and {"role", "content"} <= {f.name for f in prompt.value_type}
    reward_model = schema.field("reward_model").type
    assert {f.name for f in reward_model} == {"style", "ground_truth"}
    assert pa.types.is_integer(schema.field("extra_info").type.field("index").type)
    rows = table.to_pylist()
    assert [r["extra_info"]["index"] for r in rows] == [0, 1, 2, 3]
    assert [r["reward_model"] for r in rows] == [
        {"style": "rule", "ground_truth": f"task-{i}"} for i in range(4)
    ]
    assert {r["data_source"] for r in rows} == {"envlab:adder"}
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]
    assert json.loads(rows[0]["extra_info"]["tools"])[0]["function"]["name"] == "add"
    alive = export_run(
        run, tmp_path / "alive.parquet", ExportOptions(format="verl", drop_dead=True)
    )
    assert alive.n_rows == 2 and alive.skipped == {"in a dead group (--drop-dead)": 2}


async def test_verl_reads_and_renders_the_rows_as_its_dataset_does(
    tok: Any, tmp_path: Path
) -> None:
    run = await served_run(tok, tmp_path / "run", "text")  # tools in the system prompt
    ds = export(run, tmp_path / "verl.parquet", "verl")
    prompts = {t.group_id: t.tokens.prompt_ids for t in run.trajectories()}  # type: ignore[union-attr]
    assert len(ds) == len(prompts) == 2
    for row in ds:
        # RLHFDataset.maybe_filter_out_long_prompts / the agent loop: the chat template over
        # row[prompt_key] with the generation prompt; __getitem__: extra_info's index and
        # tools_kwargs; the reward manager: reward_model["ground_truth"], data_source
        ids = tok.apply_chat_template(row["prompt"], add_generation_prompt=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        assert ids == prompts[row["extra_info"]["group_id"]]
        assert isinstance(row["extra_info"]["index"], int)
        assert row["extra_info"].get("tools_kwargs", {}) == {}
        assert row["reward_model"]["ground_truth"] == row["extra_info"]["task_id"]
        assert row["data_source"] == "envlab:calc" and row["ability"] == "tool-use"


def test_verl_wants_parquet(run: RunDir, tmp_path: Path) -> None:
    from envlab.core import ConfigError

    with pytest.raises(ConfigError, match="Parquet"):
        export_run(run, tmp_path / "verl.jsonl", ExportOptions(format="verl"))
    assert not (tmp_path / "verl.jsonl").exists()


# --- SkyRL and slime ----------------------------------------------------------------------------

# SkyRL a9564572, skyrl/train/generators/base.py: class GeneratorOutput(TypedDict) (the
# fields a generator fills per trajectory; the rest are metrics, timings and multimodal inputs)
# and TrajectoryID(instance_id, repetition_id)
SKYRL_GENERATOR_OUTPUT = {
    "prompt_token_ids", "response_ids", "rewards", "loss_masks", "stop_reasons",
    "rollout_metrics", "rollout_logprobs", "trajectory_ids",
}  # fmt: skip
SKYRL_TRAJECTORY_ID = ("instance_id", "repetition_id")
# slime 624b824a, slime/utils/types.py: @dataclass class Sample (its rollout fields)
SLIME_SAMPLE = {
    "group_index", "index", "prompt", "tokens", "response_length", "reward", "loss_mask",
    "rollout_log_probs", "weight_versions", "status",
}  # fmt: skip
SLIME_STATUS_VALUES = {"pending", "completed", "truncated", "aborted", "failed"}


def test_tokens_rows_are_skyrls_generator_output(run: RunDir, tmp_path: Path) -> None:
    rows = export(run, tmp_path / "t.parquet", "tokens", drift="off").to_list()
    out = skyrl_generator_output(rows)
    assert set(out) == SKYRL_GENERATOR_OUTPUT
    names = {k.split(".")[0] for k in SKYRL_FIELDS}
    assert names <= SKYRL_GENERATOR_OUTPUT
    assert {k.split(".")[1] for k in SKYRL_FIELDS if "." in k} == set(SKYRL_TRAJECTORY_ID)
    for col in SKYRL_FIELDS.values():  # each field is one column of the row, as it is
        assert col in rows[0]
    for i, r in enumerate(rows):
        assert out["prompt_token_ids"][i] == r["prompt_ids"]
        assert len(out["response_ids"][i]) == len(out["loss_masks"][i])
        assert len(out["rollout_logprobs"][i]) == len(out["response_ids"][i])
        assert out["trajectory_ids"][i] == (r["group_id"], r["sample_index"])
        assert out["stop_reasons"][i] is None  # the rows of tests/export/runs.py record none


def test_tokens_rows_are_slimes_samples(run: RunDir, tmp_path: Path) -> None:
    rows = export(run, tmp_path / "t.jsonl", "tokens", drift="off").to_list()
    assert set(SLIME_FIELDS) == SLIME_SAMPLE
    groups = {}
    for i, r in enumerate(rows):
        s = slime_sample_fields(r, i)
        assert set(s) == SLIME_SAMPLE and s["status"] in SLIME_STATUS_VALUES
        n = s["response_length"]
        assert s["tokens"][-n:] == r["completion_ids"] and s["tokens"][:-n] == r["prompt_ids"]
        assert len(s["loss_mask"]) == len(s["rollout_log_probs"]) == n
        groups.setdefault(s["group_index"], set()).add(r["group_id"])
    assert all(len(g) == 1 for g in groups.values()) and sorted(groups) == [0, 1, 2, 3]
