"""The torch engine's load of the embedded GGUF, with and without parsing the file once.

transformers parses a GGUF file anew for the config, the weights and the tokenizer, and rebuilds
gguf's tensor-name map per module; ``torch_engine._parsed_once`` caches both within a load.
Each variant loads in a fresh process (imports included, as a user's first ``--agent smollm2``
pays), alternating, ``--repeat`` times; prints seconds and the ratio.

    python bench/models/torch_load.py --repeat 2
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

CODE = """
import contextlib, sys
import envlab.models.torch_engine as te
if sys.argv[1] == "plain":
    te._parsed_once = contextlib.nullcontext
from envlab.models.local import new_engine
from envlab.models.weights import SMOLLM2_MODEL_ID, smollm2_path
new_engine(smollm2_path(), backend="torch", model_id=SMOLLM2_MODEL_ID)
"""


def once(variant: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CODE, variant], check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    times: dict[str, list[float]] = {"plain": [], "parsed once": []}
    for _ in range(args.repeat):
        for variant in times:
            times[variant].append(once("plain" if variant == "plain" else "once"))
    for variant, xs in times.items():
        runs = ", ".join(f"{x:.1f}" for x in xs)
        print(f"{variant:12s} {statistics.median(xs):6.1f} s  (runs: {runs})")
    ratio = statistics.median(times["plain"]) / statistics.median(times["parsed once"])
    print(f"parsed once is {ratio:.2f}x faster")


if __name__ == "__main__":
    main()
