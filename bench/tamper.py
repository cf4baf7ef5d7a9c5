"""The cost of the shared mode's tamper evidence (``envlab.sandbox.image.tamper``) beside what
it protects: arming the agent's layer (``atime = 0`` on each file) and reading it back after the
tests, for layers of 1k, 10k and 50k files (a pip-installed library is a few thousand), against
a python start-up and import of a small library through the same files (what a grade does).

    python bench/tamper.py [--files 1000 10000 50000]

Prints, per layer size, the seconds to arm and to read back, and their ratio to one
``python3 -c 'import json'`` run (the floor of any test.sh that uses Python), side by side.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from envlab.sandbox.image import tamper


def make_layer(root: Path, n: int) -> None:
    per_dir = 200
    for i in range(n):
        d = root / "usr/local/lib/python3/site-packages" / f"pkg{i // per_dir}"
        if i % per_dir == 0:
            d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"X = {i}\n")


def timed(fn, *args):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, nargs="+", default=[1000, 10000, 50000])
    args = ap.parse_args()
    t_py, _ = timed(subprocess.run, [sys.executable, "-c", "import json"])
    print(f"python3 -c 'import json': {t_py:.3f} s")
    print(f"{'files':>8} {'arm s':>8} {'read back s':>12} {'total / python start':>22}")
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        for n in args.files:
            layer = Path(tmp) / f"layer-{n}"
            make_layer(layer, n)
            t_arm, armed = timed(tamper.arm, layer)
            for i in range(0, n, max(1, n // 10)):  # the "tests" read a tenth of the files
                (layer / "usr/local/lib/python3/site-packages" / f"pkg{i // 200}" /
                 f"mod{i}.py").read_bytes()  # fmt: skip
            t_back, found = timed(tamper.touched, armed)
            assert len(found) == len(range(0, n, max(1, n // 10))), len(found)
            print(f"{n:>8} {t_arm:>8.3f} {t_back:>12.3f} {(t_arm + t_back) / t_py:>22.1f}")


if __name__ == "__main__":
    main()
