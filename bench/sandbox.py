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

Then, side by side in the same run (``--sections``):

- ``seccomp``: ``exec(["true"])`` in one held sandbox with the seccomp filter and in one without;
- ``storage``: create + close of a sandbox with no storage bound, with ``storage_bytes`` on
  ext4 (a loop-mounted sparse image) and on tmpfs; then ``exec true`` and a small-file workload
  (500 files written and removed) in a held sandbox of each kind;
- ``verifier``: setting up the verifier's view of a frozen workspace (~1k files, ~20k files, one
  8 GiB sparse file) and running ``true`` in it, by copy (``copy_tree`` + chown, as the
  verifier did) vs by overlay (``app_overlay=True``: no copy), with the host bytes each writes.
  ``shutil.copytree`` (the copy before this change) is timed on the small workspaces.

    python bench/sandbox.py --rounds 300
    python bench/sandbox.py --rounds 100 --sections seccomp,storage,verifier
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from envlab.sandbox import BubblewrapSandbox, Limits
from envlab.sandbox.layout import bwrap_binary, host_layout
from envlab.sandbox.workspace import copy_tree, state_dir


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


def same_argv(box: BubblewrapSandbox, seccomp_fd: int | None = None) -> list[str]:
    """The command line ``box`` runs for ``exec(["true"])``, without its status and start-gate
    pipes (so also without the rlimits the gate sets); with ``seccomp_fd``, its seccomp program."""
    argv = box._argv(["true"], box.env, box.workdir, [], -1, -1, seccomp_fd)
    # no seccomp_fd here: the bare variants have none either (the seccomp section measures it)
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


# --- seccomp, bounded storage, the verifier without a copy ----------------------------------
async def interleaved(
    rounds: int, variants: dict[str, Callable[[], Awaitable[object]]]
) -> dict[str, list[float]]:
    """``rounds`` samples of each variant, one of each per round, in rotating order."""
    times: dict[str, list[float]] = {k: [] for k in variants}
    names = list(variants)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            await variants[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def show(times: dict[str, list[float]], base: str) -> None:
    for name, xs in times.items():
        delta = (statistics.median(xs) - statistics.median(times[base])) * 1e3
        extra = f"   {delta:+7.2f} ms vs {base}" if name != base else ""
        print(row(name, xs) + extra)


async def exec_true(box: BubblewrapSandbox) -> None:
    res = await box.exec(["true"])
    assert res.exit_code == 0, res


async def seccomp_section(rounds: int) -> None:
    print(f"\nexec true in a held sandbox, with and without seccomp, {rounds} rounds")
    on = await BubblewrapSandbox.create()
    off = await BubblewrapSandbox.create(seccomp=False)
    try:
        times = await interleaved(
            rounds, {"no-seccomp": lambda: exec_true(off), "seccomp": lambda: exec_true(on)}
        )
    finally:
        await on.close()
        await off.close()
    show(times, "no-seccomp")


async def create_close(limits: Limits | None) -> None:
    box = await BubblewrapSandbox.create(limits=limits)
    await box.close()


SMALL_FILES = "for i in $(seq 500); do echo x > /app/f$i; done; rm /app/f*"


async def storage_section(rounds: int, size: int) -> None:
    kinds: dict[str, Limits | None] = {
        "unbounded": None,
        "ext4": Limits(storage_bytes=size, storage_fs="ext4"),
        "tmpfs": Limits(storage_bytes=size, storage_fs="tmpfs"),
    }
    print(f"\ncreate + close, storage_bytes = {size >> 20} MiB, {rounds} rounds")
    variants = {k: (lambda lim=lim: create_close(lim)) for k, lim in kinds.items()}
    show(await interleaved(rounds, variants), "unbounded")  # type: ignore[arg-type]
    boxes = {k: await BubblewrapSandbox.create(limits=lim) for k, lim in kinds.items()}
    try:
        print(f"\nexec true on each storage, {rounds} rounds")
        variants = {k: (lambda b=b: exec_true(b)) for k, b in boxes.items()}
        show(await interleaved(rounds, variants), "unbounded")  # type: ignore[arg-type]
        n = max(5, rounds // 10)
        print(f"\n500 small files written and removed on each storage, {n} rounds")
        variants = {k: (lambda b=b: b.exec(SMALL_FILES)) for k, b in boxes.items()}
        show(await interleaved(n, variants), "unbounded")  # type: ignore[arg-type]
    finally:
        for b in boxes.values():
            await b.close()


def make_workspace(root: Path, files: int, sparse: int = 0) -> Path:
    """A frozen workspace: ``files`` small files in directories of 100, and a sparse file."""
    root.mkdir(parents=True)
    for i in range(files):
        d = root / f"d{i // 100}"
        if i % 100 == 0:
            d.mkdir()
        (d / f"f{i}.py").write_text(f"x = {i}\n" * 8)
    if sparse:
        with open(root / "sparse.bin", "wb") as f:
            f.truncate(sparse)
    return root


def allocated(root: Path) -> int:
    seen: dict[tuple[int, int], int] = {}
    for p in [root, *root.rglob("*")]:
        st = p.lstat()
        seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


async def verify_by_copy(ws: Path, copier: Callable[[Path, Path], object]) -> int:
    """The verifier's view made as before: a copy, chowned to the verifier's uid."""
    dest = Path(tempfile.mkdtemp(prefix="bench-copy-", dir=state_dir())) / "app"
    try:
        await asyncio.to_thread(copier, ws, dest)
        written = allocated(dest)
        box = await BubblewrapSandbox.create(app_dir=dest, limits=Limits())
        try:
            await exec_true(box)
        finally:
            await box.close()
        return written
    finally:
        await asyncio.to_thread(shutil.rmtree, dest.parent, True)


async def verify_by_overlay(ws: Path) -> int:
    box = await BubblewrapSandbox.create(
        app_dir=ws, app_overlay=True, limits=Limits(storage_bytes=1 << 30)
    )
    try:
        await exec_true(box)
        return allocated(box.storage.root) if box.storage else 0
    finally:
        await box.close()


async def verifier_section(rounds: int, old_sparse_copy: bool) -> None:
    base = Path(tempfile.mkdtemp(prefix="bench-ws-", dir=state_dir()))
    cases = {"1k files": (1000, 0), "20k files": (20000, 0), "8 GiB sparse": (10, 8 << 30)}
    try:
        for label, (files, sparse) in cases.items():
            where = base / label.replace(" ", "-")
            ws = await asyncio.to_thread(make_workspace, where, files, sparse)
            n = rounds if files <= 1000 else max(3, rounds // 3)
            with_old = not sparse or old_sparse_copy
            await verifier_case(label, ws, n, with_old)
    finally:
        await asyncio.to_thread(shutil.rmtree, base, True)


async def verifier_case(label: str, ws: Path, rounds: int, with_old: bool) -> None:
    written: dict[str, int] = {}

    async def run(name: str, fn: Callable[[], Awaitable[int]]) -> None:
        written[name] = await fn()

    variants: dict[str, Callable[[], Awaitable[object]]] = {
        "copy": lambda: run("copy", lambda: verify_by_copy(ws, copy_tree)),
        "overlay": lambda: run("overlay", lambda: verify_by_overlay(ws)),
    }
    if with_old:
        variants["copy (shutil, before)"] = lambda: run(
            "copy (shutil, before)", lambda: verify_by_copy(ws, _shutil_copy)
        )
    print(f"\nverifier setup + exec true + close, {label} ({allocated(ws) >> 10} KiB on disk), "
          f"{rounds} rounds")  # fmt: skip
    show(await interleaved(rounds, variants), "copy")
    for name, b in written.items():
        print(f"  {name:<22} host bytes written: {b / (1 << 20):9.1f} MiB")


def _shutil_copy(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True)


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--concurrent", type=int, default=50)
    ap.add_argument(
        "--sections", default="base,seccomp,storage,verifier", help="comma-separated subset"
    )
    ap.add_argument("--storage-mb", type=int, default=1024)
    ap.add_argument(
        "--old-sparse-copy", action="store_true", help="also copy 8 GiB sparse with shutil"
    )
    args = ap.parse_args()
    sections = set(args.sections.split(","))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, bwrap {bwrap_binary()}")
    if "base" in sections:
        await base_section(args.rounds, args.concurrent)
    if "seccomp" in sections:
        await seccomp_section(args.rounds)
    if "storage" in sections:
        await storage_section(args.rounds, args.storage_mb << 20)
    if "verifier" in sections:
        await verifier_section(max(3, args.rounds // 10), args.old_sparse_copy)


async def base_section(rounds: int, n_concurrent: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        print(f"\ncreate + exec true + destroy, {rounds} interleaved rounds")
        times = await sequential(rounds, workspace)
        for name, xs in times.items():
            print(row(name, xs))
        p50 = {k: statistics.median(v) for k, v in times.items()}
        ratio, own = p50["envlab"] / p50["bare-bwrap"], p50["envlab"] / p50["bwrap-same-argv"]
        print(f"\nenvlab / bare-bwrap p50:      {ratio:.2f}  (target <= 1.3)")
        print(f"envlab / bwrap-same-argv p50: {own:.2f}  (what envlab's Python adds)")
        print(f"\n{n_concurrent} sandboxes at once")
        for name, (wall, lat) in (await concurrent(n_concurrent, workspace)).items():
            print(row(name, lat) + f"   wall {wall * 1e3:7.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
