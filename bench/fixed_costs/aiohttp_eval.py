"""The floor of ``bench/fixed_costs.py``'s eval section: what a careful person writes by hand to
evaluate a model on ``arith`` through an OpenAI-compatible endpoint, with aiohttp.

Every task of the bench's task file is asked once (system prompt, then the problem), 32 requests
in flight over one pooled session; the reply's last number is compared with the answer; one
JSON line per sample is written and flushed. Prints ``RESULT {...}``.

    python bench/fixed_costs/aiohttp_eval.py --base-url URL --tasks tasks.json --out out.jsonl
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from pathlib import Path
from typing import Any

import aiohttp

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def correct(text: str, answer: float) -> bool:
    found = NUMBER.findall(text)
    return bool(found) and abs(float(found[-1]) - answer) < 1e-6


async def main(base_url: str, data: dict[str, Any], out: Path, concurrency: int) -> int:
    todo = iter(data["tasks"])
    right = 0
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer stub"}) as session:
        with out.open("w") as fh:

            async def worker() -> None:
                nonlocal right
                for task in todo:
                    messages = [
                        {"role": "system", "content": data["system"]},
                        {"role": "user", "content": task["prompt"]},
                    ]
                    body = {"model": "stub", "messages": messages}
                    async with session.post(f"{base_url}/chat/completions", json=body) as r:
                        reply = await r.json()
                    text = reply["choices"][0]["message"]["content"] or ""
                    ok = correct(text, task["answer"])
                    right += ok
                    line = {"id": task["id"], "reply": text, "reward": float(ok)}
                    fh.write(json.dumps(line) + "\n")
                    fh.flush()

            await asyncio.gather(*(worker() for _ in range(concurrency)))
    return right


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--tasks", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--concurrency", type=int, default=32)
    a = ap.parse_args()
    tasks = json.loads(a.tasks.read_text())
    n_right = asyncio.run(main(a.base_url, tasks, a.out, a.concurrency))
    print("RESULT " + json.dumps({"n": len(tasks["tasks"]), "correct": n_right}), flush=True)
