"""inspect_ai's side of ``bench/peers.py`` (runs in the inspect_ai virtualenv the bench made):
the bench's arith problems as samples, ``system_message`` + ``generate()``, scored by
``match(numeric=True)``, against the stub through the ``openai`` provider (chat completions).
Prints one JSON line of results."""

from __future__ import annotations

import argparse
import json
import os
import time
from importlib.metadata import version


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", required=True)
    a = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "stub")

    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, system_message

    with open(a.tasks) as f:
        data = json.load(f)
    samples = [
        Sample(id=t["id"], input=t["prompt"], target=f"{t['answer']:g}")
        for t in data["tasks"][: a.samples]
    ]
    task = Task(
        dataset=samples,
        solver=[system_message(data["system"]), generate()],
        scorer=match(numeric=True),
    )
    t0 = time.perf_counter()
    (log,) = eval(
        task,
        model="openai/stub",
        model_base_url=a.base_url,
        model_args={"responses_api": False},
        max_connections=a.concurrency,
        max_samples=a.concurrency,
        log_dir=a.out,
        display="none",
    )
    seconds = time.perf_counter() - t0
    scores = log.results.scores if log.results else []
    accuracy = scores[0].metrics["accuracy"].value if scores else 0.0
    n = len(samples) if log.status == "success" else 0
    res = {
        "n": n,
        "correct": round(accuracy * n),
        "errors": 0 if log.status == "success" else len(samples),
        "seconds": seconds,
        "version": version("inspect_ai"),
        "status": log.status,
    }
    print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
