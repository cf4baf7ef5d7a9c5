"""Sandbox cost: envlab's bubblewrap sandbox vs bare ``bwrap ... true`` vs bare ``true``.

One sample of each variant is:

- ``envlab``: ``BubblewrapSandbox.create()`` (uid lease, workspace, argv) + ``exec(["true"])``
  (bwrap, rlimits and cgroup set on its blocked PID 1, uid drop via setpriv, status pipe,
  capped output) + ``close()``;
- ``bwrap-same-argv``: ``subprocess.run`` of the command line envlab runs, without the status
  and start-gate pipes (no workspace, no Python around it): what envlab itself adds is
  ``envlab / bwrap-same-argv``;
- ``bare-bwrap``: ``subprocess.run`` of a hand-written ``bwrap ... true`` with the same mounts
  and namespaces but no uid drop and no rlimits (``/etc`` bound whole);
- ``subprocess-true``: ``subprocess.run(["true"])``.

Variants are interleaved (one sample of each per round) so that a load change on the machine
hits them all alike. Then 50 sandboxes at once: create, ``exec true`` and close 50 envlab
sandboxes concurrently, vs 50 bare bwraps started at once.

    python bench/sandbox.py --rounds 300
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from envlab.sandbox import BubblewrapSandbox
from envlab.sandbox.layout import bwrap_binary, host_layout
from envlab.sandbox.workspace import state_dir


def bare_bwrap_argv(workspace: Path) -> list[str]:
    """A careful hand-written bwrap command line: read-only system, /app, own namespaces."""
    a = [bwrap_binary()]
    layout = host_layout(state_dir())
    for d in layout.dirs:
        a += ["--perms", "0755", "--dir", d]
    for e in layout.entries:
        if e.target == "/etc":
            a += ["--ro-bind", "/etc", "/etc"]
        elif e.kind == "link":
            a += ["--symlink", e.source, e.target]
        else:
            a += ["--ro-bind", e.source, e.target]
    a += ["--bind", str(workspace), "/app", "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc"]
    a += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    a += ["--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    a += ["--setenv", "PATH", "/usr/bin:/bin", "--chdir", "/app", "--remount-ro", "/", "--"]
    return [*a, "true"]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(name: str, xs: list[float]) -> str:
    return f"{name:<20} p50 {pct(xs, 0.5) * 1e3:7.2f} ms   p95 {pct(xs, 0.95) * 1e3:7.2f} ms"


async def envlab_once() -> None:
    box = await BubblewrapSandbox.create()
    try:
        res = await box.exec(["true"])
        assert res.exit_code == 0, res
    finally:
        await box.close()


def same_argv(box: BubblewrapSandbox) -> list[str]:
    """The command line ``box`` runs for ``exec(["true"])``, without its status and start-gate
    pipes (so also without the rlimits the gate sets)."""
    argv = box._argv(["true"], box.env, box.workdir, [], status_fd=-1, block_fd=-1)
    for opt in ("--json-status-fd", "--block-fd"):
        i = argv.index(opt)
        argv = argv[:i] + argv[i + 2 :]
    return argv


async def sequential(rounds: int, workspace: Path) -> dict[str, list[float]]:
    bare = bare_bwrap_argv(workspace)
    held = await BubblewrapSandbox.create()  # its workspace and uid, for the same command line
    same = same_argv(held)
    variants: dict[str, Callable[[], object]] = {
        "subprocess-true": lambda: subprocess.run(["true"], check=True),
        "bare-bwrap": lambda: subprocess.run(bare, check=True),
        "bwrap-same-argv": lambda: subprocess.run(same, check=True),
    }
    times: dict[str, list[float]] = {k: [] for k in ["envlab", *variants]}
    for _ in range(5):  # warm up: staged /etc, page cache
        await envlab_once()
        subprocess.run(bare, check=True)
    for i in range(rounds):
        order = ["envlab", *variants]
        order = order[i % len(order) :] + order[: i % len(order)]
        for name in order:
            t0 = time.perf_counter()
            if name == "envlab":
                await envlab_once()
            else:
                variants[name]()
            times[name].append(time.perf_counter() - t0)
    await held.close()
    return times


async def concurrent(n: int, workspace: Path) -> dict[str, tuple[float, list[float]]]:
    async def timed_envlab() -> float:
        t0 = time.perf_counter()
        await envlab_once()
        return time.perf_counter() - t0

    async def timed_bare() -> float:
        t0 = time.perf_counter()
        p = await asyncio.create_subprocess_exec(*bare_bwrap_argv(workspace))
        await p.wait()
        return time.perf_counter() - t0

    out = {}
    for name, fn in (("envlab", timed_envlab), ("bare-bwrap", timed_bare)):
        t0 = time.perf_counter()
        lat = await asyncio.gather(*(fn() for _ in range(n)))
        out[name] = (time.perf_counter() - t0, list(lat))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, bwrap {bwrap_binary()}")
        print(f"\ncreate + exec true + destroy, {args.rounds} interleaved rounds")
        times = await sequential(args.rounds, workspace)
        for name, xs in times.items():
            print(row(name, xs))
        p50 = {k: statistics.median(v) for k, v in times.items()}
        ratio, own = p50["envlab"] / p50["bare-bwrap"], p50["envlab"] / p50["bwrap-same-argv"]
        print(f"\nenvlab / bare-bwrap p50:      {ratio:.2f}  (target <= 1.3)")
        print(f"envlab / bwrap-same-argv p50: {own:.2f}  (what envlab's Python adds)")
        print(f"\n{args.concurrent} sandboxes at once")
        for name, (wall, lat) in (await concurrent(args.concurrent, workspace)).items():
            print(row(name, lat) + f"   wall {wall * 1e3:7.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
