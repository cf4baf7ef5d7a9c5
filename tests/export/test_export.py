"""``export_run``: each format's rows, what is left out and why, and files ``datasets`` loads."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from envlab.core import ConfigError
from envlab.export import ExportOptions, export_run, renderer_for, scan_run
from envlab.runs import RunDir
from tests.export.runs import TOOLS

UNSCORED_IDS = {"g0-4", "g2-1"}  # the env error and the infra error never retried


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def export(run: RunDir, out: Path, **opts: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    renderer = opts.pop("renderer", None)
    report = export_run(run, out, ExportOptions(**opts), renderer)
    return rows(out), report.to_dict()


def test_sft_best_per_group_at_or_above_the_threshold(run: RunDir, tmp_path: Path) -> None:
    got, report = export(run, tmp_path / "sft.jsonl", format="sft")
    assert [r["episode_id"] for r in got] == ["g0-0", "g1-0"]  # ties: the lowest sample
    assert report["skipped"] == {"below --min-reward": 5, "not the best of its group": 3}
    assert report["unscored"] == {"env_error": 1, "infra_error": 1}
    row = got[0]
    assert row["messages"] == run.store.load()[0].messages  # the transcript as recorded
    assert json.loads(row["tools"]) == TOOLS  # native mode: the tools the requests carried
    everyone, _ = export(run, tmp_path / "all.jsonl", format="sft", best_per_group=False)
    assert [r["episode_id"] for r in everyone] == ["g0-0", "g0-2", "g1-0", "g1-1", "g1-2"]
    low, _ = export(run, tmp_path / "low.jsonl", format="sft", min_reward=0.25)
    assert [r["episode_id"] for r in low] == ["g0-0", "g1-0", "g2-0", "g3-1"]


def test_dpo_pairs_best_and_worst_with_a_margin(run: RunDir, tmp_path: Path) -> None:
    got, report = export(run, tmp_path / "dpo.jsonl", format="dpo")
    assert len(got) == 1
    (pair,) = got
    assert (pair["chosen_episode_id"], pair["rejected_episode_id"]) == ("g0-0", "g0-1")
    assert (pair["chosen_reward"], pair["rejected_reward"]) == (1.0, 0.0)
    assert [m["role"] for m in pair["prompt"]] == ["system", "user"]
    assert pair["chosen"][0]["role"] == "assistant" and pair["chosen"][-1]["content"] == "2"
    assert pair["rejected"][-1]["content"] == "no idea"
    # g1: no margin; g2: one scored episode; g3: 0.25 < 0.5
    assert report["skipped"] == {"margin below --min-margin": 2, "group of one (no pair)": 1}
    wider, _ = export(run, tmp_path / "dpo2.jsonl", format="dpo", min_margin=0.25)
    assert [p["group_id"] for p in wider] == ["g0", "g3"]


def test_grpo_advantages_and_dead_groups(run: RunDir, tmp_path: Path) -> None:
    got, report = export(run, tmp_path / "grpo.jsonl", format="grpo")
    ids = [r["episode_id"] for r in got]
    assert not UNSCORED_IDS & set(ids) and len(ids) == 10
    std = math.sqrt(0.6875 / 3)  # g0's rewards 1, 0, 1, 0.5: mean 0.625, sample std
    by_id = {r["episode_id"]: r for r in got}
    for eid, r in (("g0-0", 1.0), ("g0-1", 0.0), ("g0-2", 1.0), ("g0-3", 0.5)):
        assert math.isclose(by_id[eid]["advantage"], (r - 0.625) / (std + 1e-6), rel_tol=1e-12)
        assert by_id[eid]["reward"] == r and by_id[eid]["dead_group"] is False
    assert all(by_id[e]["dead_group"] and by_id[e]["advantage"] == 0.0 for e in ("g1-0", "g2-0"))
    assert report["dead_groups"] == 2 and report["n_groups"] == 4
    assert by_id["g0-0"]["completion"][-1] == {"role": "assistant", "content": "2"}
    assert by_id["g0-0"]["policy_version"] is None  # not recorded by the engine yet
    alive, report = export(run, tmp_path / "alive.jsonl", format="grpo", drop_dead=True)
    assert {r["group_id"] for r in alive} == {"g0", "g3"}
    assert report["skipped"] == {"in a dead group (--drop-dead)": 4}


def test_tokens_rows_are_the_token_view(run: RunDir, tmp_path: Path, tokenizer_dir: Path) -> None:
    renderer = renderer_for(run, str(tokenizer_dir))
    got, report = export(run, tmp_path / "t.jsonl", format="tokens", renderer=renderer)
    assert report["checked"] == 10 and report["drifted"] == []
    assert not UNSCORED_IDS & {r["episode_id"] for r in got}
    trajs = {t.episode_id: t for t in run.trajectories()}
    for r in got:
        tv = trajs[r["episode_id"]].tokens
        assert tv is not None
        assert (r["prompt_ids"], r["completion_ids"]) == (tv.prompt_ids, tv.completion_ids)
        assert r["loss_mask"] == tv.loss_mask and r["logprobs"] == tv.logprobs
        assert len(r["loss_mask"]) == len(r["completion_ids"]) == len(r["logprobs"])
        assert r["token_drift"] is None and r["policy_version"] is None
    g00 = next(r for r in got if r["episode_id"] == "g0-0")
    assert g00["advantage"] > 0 and g00["group_id"] == "g0"


def test_loss_mask_is_one_on_the_models_tokens_only(run: RunDir, tmp_path: Path, tok: Any) -> None:
    got, _ = export(run, tmp_path / "t.jsonl", format="tokens", drift="off")
    r = got[0]
    pairs = list(zip(r["completion_ids"], r["loss_mask"], strict=True))
    model = tok.decode([t for t, m in pairs if m])
    other = tok.decode([t for t, m in pairs if not m])
    assert model == '<tool_call>add {"a": 0, "b": 2}</tool_call><|im_end|>2<|im_end|>'
    assert other == "\n<|im_start|>tool\n2<|im_end|>\n<|im_start|>assistant\n"


def test_parquet_and_jsonl_load_with_datasets(run: RunDir, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    for fmt in ("sft", "dpo", "grpo", "tokens"):
        for suffix in ("jsonl", "parquet"):
            out = tmp_path / f"{fmt}.{suffix}"
            n = export_run(run, out, ExportOptions(format=fmt, drift="off")).n_rows
            kind = "json" if suffix == "jsonl" else "parquet"
            ds = datasets.load_dataset(kind, data_files=str(out), split="train")
            assert len(ds) == n > 0, (fmt, suffix)
    ds = datasets.load_dataset("parquet", data_files=str(tmp_path / "tokens.parquet"))["train"]
    assert ds[0]["loss_mask"][:3] == [1, 1, 1] and isinstance(ds[0]["prompt_ids"][0], int)
    sft = datasets.load_dataset("parquet", data_files=str(tmp_path / "sft.parquet"))["train"]
    assert sft[0]["messages"][0] == {
        **{k: None for k in sft[0]["messages"][0]}, "role": "system",
        "content": "You add numbers with the tools.",
    }  # fmt: skip


def test_a_failed_export_leaves_no_file(run: RunDir, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"\.jsonl .* \.parquet"):
        export_run(run, tmp_path / "x.csv", ExportOptions(format="sft"))
    assert list(tmp_path.iterdir()) == [tmp_path / "run"]


def test_scan_counts_what_the_report_counts(run: RunDir, tmp_path: Path) -> None:
    report = export_run(run, tmp_path / "g.jsonl", ExportOptions(format="grpo"))
    scan = scan_run(run)
    assert report.n_rows == sum(len(g.members) for g in scan.groups.values())
    assert report.n_rows + scan.n_unscored == scan.n_episodes


def test_a_pair_from_different_prompts_is_not_a_preference(tmp_path: Path, tok: Any) -> None:
    from tests.export.runs import PLAN, trajectory, write_run

    trajs = [trajectory(tok, ep) for ep in PLAN]
    for t in trajs:  # g0's worst sample saw another system prompt
        if t.episode_id == "g0-1":
            t.messages[0] = {"role": "system", "content": "Another prompt."}
    run = RunDir(write_run(tmp_path / "r", trajs))
    got, report = export(run, tmp_path / "dpo.jsonl", format="dpo", min_margin=0.25)
    assert [p["group_id"] for p in got] == ["g3"]
    assert report["skipped"]["chosen and rejected start from different prompts"] == 1


def test_a_recorded_policy_version_is_exported(tmp_path: Path, tok: Any) -> None:
    from tests.export.runs import PLAN, trajectory, write_run

    trajs = [trajectory(tok, ep) for ep in PLAN]
    for t in trajs:
        t.info["policy_version"] = 7 if t.group_id == "g0" else None
    run = RunDir(write_run(tmp_path / "r", trajs))
    got, _ = export(run, tmp_path / "t.jsonl", format="tokens", drift="off")
    assert {r["episode_id"]: r["policy_version"] for r in got if r["group_id"] == "g0"} == {
        "g0-0": "7", "g0-1": "7", "g0-2": "7", "g0-3": "7",
    }  # fmt: skip
    assert all(r["policy_version"] is None for r in got if r["group_id"] != "g0")
