"""A public command's cost: a command with the network stack attached (pasta, ``network=True``)
against one without the network (``network=False``), side by side in one run.

    python bench/network.py [--commands 40] [--no-image]

Each round runs one ``exec true`` in a held sandbox of each kind, interleaved, so that a load
change on the machine hits both alike: host mode (``BubblewrapSandbox``) and, as root, image
mode (``ImageSandbox`` over a tiny base copied from the host: tests/envs/taskfolder's
``make_tiny_rootfs``) and the shared sandbox (``SharedImageSandbox``: one stack for its life).
Then the stacks alone: from start to a configured namespace (an ``unshare --net`` one), pasta as
envlab runs it, and slirp4netns (the alternative, where installed), and pasta's exit after a kill
(its tap device's removal: envlab reaps it off the command's path).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def row(name: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p90 = xs[int(0.9 * (len(xs) - 1))]
    return f"  {name:<34} median {statistics.median(xs) * 1e3:7.1f} ms   p90 {p90 * 1e3:7.1f} ms"


async def side_by_side(title: str, make: Any, n: int) -> None:
    off, on = await make(False), await make(True)
    try:
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(3):  # warm both
            await off.exec("true")
            await on.exec("true")
        for _ in range(n):
            for net, box in ((False, off), (True, on)):
                t0 = time.perf_counter()
                res = await box.exec("true", timeout=60)
                times[net].append(time.perf_counter() - t0)
                assert res.exit_code == 0, res.stderr
    finally:
        await off.close()
        await on.close()
    print(title)
    print(row("no-network (exec true)", times[False]))
    print(row("public, pasta (exec true)", times[True]))
    extra = statistics.median(times[True]) - statistics.median(times[False])
    print(f"  {'public - no-network':<34} {extra * 1e3:+7.1f} ms per command")


def _netns() -> subprocess.Popen[bytes]:
    holder = subprocess.Popen(["unshare", "--net", "--", "sleep", "60"])
    for _ in range(1000):  # until unshare has exec'd sleep in the new namespace
        if os.readlink(f"/proc/{holder.pid}/ns/net") != os.readlink("/proc/self/ns/net"):
            return holder
        time.sleep(0.001)
    raise RuntimeError("unshare --net did not start")


def stacks(n: int) -> None:
    from envlab.sandbox.network import Pasta, PublicNetwork

    network = PublicNetwork.from_host()
    ready, exits, slirp = [], [], []
    for _ in range(n):
        holder = _netns()
        stack = Pasta(network)
        t0 = time.perf_counter()
        stack.start(holder.pid)
        stack.wait_ready()
        ready.append(time.perf_counter() - t0)
        proc = stack.proc
        assert proc is not None
        t0 = time.perf_counter()
        proc.kill()
        proc.wait()
        exits.append(time.perf_counter() - t0)
        stack.stop()
        holder.kill()
        holder.wait()
        if shutil.which("slirp4netns"):
            holder = _netns()
            r, w = os.pipe()
            t0 = time.perf_counter()
            s4 = subprocess.Popen(
                ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback",
                 "--enable-sandbox", "--enable-seccomp", "--ready-fd", str(w), str(holder.pid),
                 "tap0"], pass_fds=[w], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            os.close(w)
            assert os.read(r, 1) == b"1"
            slirp.append(time.perf_counter() - t0)
            os.close(r)
            s4.kill()
            s4.wait()
            holder.kill()
            holder.wait()
    print("the stacks alone (start to a configured namespace)")
    print(row("pasta, as envlab runs it", ready))
    if slirp:
        print(row("slirp4netns --configure", slirp))
    print(row("pasta's exit after SIGKILL", exits))


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commands", type=int, default=40)
    ap.add_argument("--no-image", action="store_true")
    args = ap.parse_args()
    from envlab.sandbox import BubblewrapSandbox, Limits

    limits = Limits(memory_bytes=1 << 30)
    print(f"{args.commands} commands of each kind, interleaved; {os.cpu_count()} CPUs")

    async def host(net: bool) -> Any:
        return await BubblewrapSandbox.create(limits=limits, network=net, name="bench-net")

    await side_by_side("host mode (BubblewrapSandbox)", host, args.commands)
    if os.geteuid() == 0 and not args.no_image:
        work = Path(tempfile.mkdtemp(prefix="envlab-bench-network-"))
        os.environ["ENVLAB_CACHE_DIR"] = str(work / "cache")
        try:
            from tests.envs.taskfolder.image_support import TINY, make_tiny_rootfs, tiny_image

            from envlab.sandbox.image.bases import register_base
            from envlab.sandbox.image.persistent import SharedImageSandbox
            from envlab.sandbox.image.sandbox import ImageSandbox

            src = make_tiny_rootfs(work / "tiny")
            image = tiny_image(register_base(TINY, src))

            async def img(net: bool) -> Any:
                return await ImageSandbox.create(image=image, limits=limits, network=net)

            async def shared(net: bool) -> Any:
                return await SharedImageSandbox.create(image=image, limits=limits, network=net)

            await side_by_side("image mode (ImageSandbox)", img, args.commands)
            await side_by_side("shared sandbox (one stack for its life)", shared, args.commands)
        finally:
            subprocess.run(["rm", "-rf", str(work)], check=False)
    stacks(max(5, args.commands // 2))


if __name__ == "__main__":
    asyncio.run(main())
