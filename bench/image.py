"""Images without Docker: build times, first and cached, and a command's cost in an image
overlay against the host-filesystem mode, side by side in one run.

    python bench/image.py [--base python:3.11-slim] [--commands 40] [--fresh-base]

Run as root (an image's files and commands are root's), with the network to Debian's and
PyPI's archives for the first build. ``--fresh-base`` builds the base root filesystem in a new
cache too (else the machine's shared one is used, built once if missing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

DOCKERFILE = """FROM {base}
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends jq >/dev/null
WORKDIR /app
COPY data.txt /app/
RUN pip install -q six==1.16.0 && python3 -c "import six"
ENV GREETING=hello
RUN echo "$GREETING" > /app/greeting.txt
"""


def make_task(root: Path, base: str) -> Path:
    task = root / "bench-image"
    for sub in ("environment", "tests", "solution"):
        (task / sub).mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "task.toml").write_text("[verifier]\ntimeout_sec = 60\n[agent]\ntimeout_sec = 60\n")
    (task / "environment" / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    (task / "environment" / "data.txt").write_text("data\n")
    (task / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (task / "solution" / "solve.sh").write_text("true\n")
    return task


async def per_command(box: object, n: int, cmd: str) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        res = await box.exec(cmd, timeout=60)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - t0)
        assert res.exit_code == 0, res.stderr
    return times


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="python:3.11-slim")
    ap.add_argument("--commands", type=int, default=40)
    ap.add_argument("--fresh-base", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="envlab-bench-image-"))
    if args.fresh_base:
        os.environ["ENVLAB_CACHE_DIR"] = str(work / "cache")
    from envlab.envs.taskfolder.model import load_task_folder
    from envlab.sandbox import BubblewrapSandbox, Limits
    from envlab.sandbox.image.bases import ensure_base
    from envlab.sandbox.image.sandbox import ImageSandbox
    from envlab.sandbox.tasks.image_build import build_image

    t0 = time.perf_counter()
    base = await asyncio.to_thread(ensure_base, args.base)
    base_s = time.perf_counter() - t0
    # the layers in a cache of their own: the first build builds every one
    os.environ["ENVLAB_CACHE_DIR"] = str(work / "layers-cache")
    from envlab.sandbox.image.bases import register_base

    await asyncio.to_thread(register_base, args.base, base.rootfs)
    task = load_task_folder(make_task(work, args.base))
    t0 = time.perf_counter()
    await build_image(task)
    first_s = time.perf_counter() - t0
    cached = []
    for _ in range(5):
        t0 = time.perf_counter()
        image = await build_image(task)
        cached.append(time.perf_counter() - t0)
    limits = Limits(memory_bytes=2 << 30)
    img_box = await ImageSandbox.create(image=image, limits=limits)
    host_box = await BubblewrapSandbox.create(limits=limits)
    rows = []
    try:
        for cmd in ("true", "python3 -c pass", "ls -R /usr/lib/python3* > /dev/null"):
            await per_command(img_box, 2, cmd)  # warm both
            await per_command(host_box, 2, cmd)
            img = await per_command(img_box, args.commands, cmd)
            host = await per_command(host_box, args.commands, cmd)
            rows.append((cmd, statistics.median(img), statistics.median(host)))
        evidence = await tamper_cost(img_box)
    finally:
        await img_box.close()
        await host_box.close()
    print(f"base {args.base}: {'built in' if not base.cached else 'found in the cache,'} "
          f"{base_s:.1f} s ({base.rootfs})")  # fmt: skip
    print(f"first build of {len(image.layers)} layers: {first_s:.1f} s")
    print(f"cached build: median {statistics.median(cached) * 1000:.0f} ms (5 runs)")
    print(f"{'command':40s} {'image ms':>10s} {'host ms':>10s} {'ratio':>7s}")
    for cmd, img_s, host_s in rows:
        print(f"{cmd:40s} {img_s * 1000:10.1f} {host_s * 1000:10.1f} {img_s / host_s:7.2f}")
    files, arm_s, back_s = evidence
    python_s = rows[1][1]
    print(f"shared mode's tamper evidence on an agent layer of {files} files: arm "
          f"{arm_s * 1000:.1f} ms + read back {back_s * 1000:.1f} ms = "
          f"{(arm_s + back_s) / python_s:.1f}x one `python3 -c pass` in the image")  # fmt: skip


async def tamper_cost(box: object) -> tuple[int, float, float]:
    """An agent layer of a few thousand files (a copy of the image's Python library, as a pip
    install writes), armed and read back as a shared grade does."""
    from envlab.sandbox.image import tamper

    await box.exec(["bash", "-c", "cp -a /usr/local/lib/python3* /opt/agent-lib 2>/dev/null || "  # type: ignore[attr-defined]
                    "cp -a /usr/lib/python3* /opt/agent-lib"], timeout=300)  # fmt: skip
    t0 = time.perf_counter()
    armed = await asyncio.to_thread(tamper.arm, box.upper)  # type: ignore[attr-defined]
    arm_s = time.perf_counter() - t0
    await box.exec(["python3", "-c", "import json, email, http.client"], timeout=60)  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    await asyncio.to_thread(tamper.tainted, armed, tamper.Expected())
    return len(armed.files), arm_s, time.perf_counter() - t0


if __name__ == "__main__":
    asyncio.run(main())
