"""verifiers' side of ``bench/peers.py`` (runs in the verifiers virtualenv the bench made):
the bench's arith problems as a ``SingleTurnEnv`` (system prompt, one model turn), a reward
function reading the final number, ``evaluate`` against the stub through its OpenAI chat
completions client. Prints one JSON line of results."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from importlib.metadata import version
from typing import Any

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tasks", required=True)
    a = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "stub")

    import verifiers as vf
    from datasets import Dataset

    with open(a.tasks) as f:
        data = json.load(f)
    rows = data["tasks"][: a.samples]
    dataset = Dataset.from_list(
        [{"question": t["prompt"], "answer": str(t["answer"])} for t in rows]
    )
    parser = vf.Parser()

    def correct(completion: Any, answer: str, **kwargs: Any) -> float:
        text = parser.parse_answer(completion) or ""
        found = NUMBER.findall(text.replace(",", ""))
        return float(bool(found) and abs(float(found[-1]) - float(answer)) < 1e-6)

    env = vf.SingleTurnEnv(
        eval_dataset=dataset,
        system_prompt=data["system"],
        parser=parser,
        rubric=vf.Rubric(funcs=[correct], weights=[1.0], parser=parser),
    )
    client = vf.ClientConfig(api_key_var="OPENAI_API_KEY", api_base_url=a.base_url)

    async def run() -> Any:
        return await env.evaluate(
            client=client,
            model="stub",
            num_examples=len(rows),
            max_concurrent=a.concurrency,
            on_progress=lambda *args: None,
        )

    t0 = time.perf_counter()
    out = asyncio.run(run())
    seconds = time.perf_counter() - t0
    rewards = _rewards(out)
    res = {
        "n": len(rewards),
        "correct": sum(1 for r in rewards if r == 1.0),
        "errors": len(rows) - len(rewards),
        "seconds": seconds,
        "version": version("verifiers"),
    }
    print("RESULT " + json.dumps(res), flush=True)


def _rewards(out: Any) -> list[float]:
    outputs = out["outputs"] if isinstance(out, dict) else getattr(out, "outputs", out)
    return [float(o["reward"] if isinstance(o, dict) else o.reward) for o in outputs]


if __name__ == "__main__":
    main()
