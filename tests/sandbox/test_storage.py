"""Bounded disk: ``storage_bytes`` bounds the whole workspace (``/app`` and ``/tmp``), attacked
from inside a real sandbox the way the issue's scripts did (many files, one huge file, a sparse
file, hard links, many inodes). The host never gives a sandbox more than the limit."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.sandbox import BubblewrapSandbox, GiB, Limits, MiB
from envlab.sandbox.workspace import copy_tree, state_dir
from tests.sandbox.conftest import SMALL, requires_bwrap, requires_root

pytestmark = [requires_bwrap, requires_root]

LIMIT = 64 * MiB
# per-file limit far above the storage limit: what stops the attacks must be the storage bound
BOUNDED = SMALL.model_copy(
    update={"storage_bytes": LIMIT, "max_file_bytes": 16 * GiB, "timeout_s": 120}
)


def allocated(path: Path) -> int:
    """Bytes the host really gave ``path`` (a file's blocks)."""
    return os.lstat(path).st_blocks * 512


def mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(path) for line in f)


async def usage(box: BubblewrapSandbox) -> int:
    """Bytes used on the sandbox's filesystem, as the sandbox's ``df`` reports them."""
    res = await box.exec("df -B1 --output=used /app | tail -1")
    return int(res.stdout)


@pytest.fixture(params=["ext4", "tmpfs"])
async def bounded(request: pytest.FixtureRequest):
    limits = BOUNDED.model_copy(update={"storage_fs": request.param})
    box = await BubblewrapSandbox.create(limits=limits, name="disk")
    try:
        assert box.storage_kind == request.param
        yield box
    finally:
        await box.close()


async def test_many_files_stop_at_the_limit_in_app_and_tmp_together(bounded) -> None:
    script = (
        "for i in $(seq 1 60); do head -c 1048576 /dev/urandom > /app/a$i || break; done;"
        "for i in $(seq 1 60); do head -c 1048576 /dev/urandom > /tmp/t$i || break; done;"
        "ls /app | wc -l; ls /tmp | wc -l"
    )
    res = await bounded.exec(script)
    in_app, in_tmp = (int(x) for x in res.stdout.split())
    assert "No space left on device" in res.stderr
    assert in_app + in_tmp <= LIMIT // MiB + 2, "/app and /tmp share one bound"
    assert await usage(bounded) <= LIMIT


async def test_one_huge_file_and_fallocate_stop_at_the_limit(bounded) -> None:
    res = await bounded.exec("head -c 1073741824 /dev/zero > /app/huge; stat -c %s /app/huge")
    assert "No space left on device" in res.stderr
    assert int(res.stdout.split()[-1]) <= LIMIT
    res = await bounded.exec("rm /app/huge; fallocate -l 1G /app/f; echo rc=$?")
    assert "rc=0" not in res.stdout
    assert await usage(bounded) <= LIMIT


async def test_a_sparse_file_cannot_take_more_than_the_limit_from_the_host() -> None:
    box = await BubblewrapSandbox.create(limits=BOUNDED, name="sparse")
    try:
        assert box.storage_kind == "ext4"
        before = os.statvfs(state_dir())
        # an 8 GiB sparse file, then its holes filled at 1 MiB steps until the disk is full
        script = (
            "truncate -s 8G /app/sparse && echo made;"
            "for off in $(seq 0 64 8191); do "
            "dd if=/dev/urandom of=/app/sparse bs=1M seek=$off count=1 conv=notrunc "
            "status=none || break; done; stat -c %s /app/sparse"
        )
        res = await box.exec(script)
        assert res.stdout.startswith("made") and int(res.stdout.split()[-1]) == 8 * GiB
        await box.exec("sync")
        await asyncio.to_thread(os.sync)
        after = os.statvfs(state_dir())
        image = box.storage.image  # type: ignore[union-attr]
        assert allocated(image) <= LIMIT, "the host gave the image no more than the limit"
        lost = (before.f_bavail - after.f_bavail) * before.f_frsize
        # other processes share this disk: allow them a little on top of the limit
        assert lost <= LIMIT + 16 * MiB, f"host lost {lost >> 20} MiB to a {LIMIT >> 20} MiB box"
        # the frozen workspace copied for a verifier stays sparse
        dest = Path(state_dir()) / f"copy-{box.name}"
        try:
            await asyncio.to_thread(copy_tree, box.host_workdir, dest)
            assert (dest / "sparse").stat().st_size == 8 * GiB
            assert allocated(dest / "sparse") <= LIMIT
        finally:
            await asyncio.to_thread(__import__("shutil").rmtree, dest, True)
    finally:
        await box.close()


async def test_hard_links_count_once_and_stay_links_when_copied(tmp_path: Path) -> None:
    async with await BubblewrapSandbox.create(limits=BOUNDED, name="links") as box:
        res = await box.exec(
            "head -c 20971520 /dev/urandom > /app/data && mkdir /app/l && "
            "for i in $(seq 1 300); do ln /app/data /app/l/$i || exit 1; done; "
            "stat -c %h /app/data"
        )
        assert res.stdout.strip() == "301", res.stderr
        assert await usage(box) <= 22 * MiB
        dest = tmp_path / "copy"
        await asyncio.to_thread(copy_tree, box.host_workdir, dest)
    st = (dest / "data").stat()
    assert st.st_nlink == 301 and (dest / "l" / "7").stat().st_ino == st.st_ino
    inodes = {p.stat().st_ino: allocated(p) for p in dest.rglob("*") if p.is_file()}
    assert len(inodes) == 1 and sum(inodes.values()) <= 21 * MiB, "one copy, not 301"


async def test_inodes_are_bounded() -> None:
    limits = BOUNDED.model_copy(update={"max_inodes": 500})
    async with await BubblewrapSandbox.create(limits=limits, name="inodes") as box:
        res = await box.exec(
            "for i in $(seq 1 2000); do : > /app/f$i 2>/dev/null || break; done; "
            "mkdir -p /tmp/d && for i in $(seq 1 2000); do ln -s x /tmp/d/$i 2>/dev/null || "
            "break; done; ls /app | wc -l; ls /tmp/d | wc -l"
        )
        files, links = (int(x) for x in res.stdout.split())
        assert files + links <= 500, res.stdout


async def test_the_filesystem_goes_with_the_sandbox() -> None:
    box = await BubblewrapSandbox.create(limits=BOUNDED, name="gone")
    storage = box.storage
    assert storage is not None and mounted(storage.fs)
    await box.exec("head -c 1000000 /dev/zero > /app/x")
    await box.close()
    assert not mounted(storage.fs) and not storage.root.exists()
    for _ in range(200):  # a loop device is freed asynchronously once unmounted
        backing = [p.read_text() for p in Path("/sys/block").glob("loop*/loop/backing_file")]
        if not any(str(storage.root) in b for b in backing):
            break
        time.sleep(0.02)
    else:
        raise AssertionError(f"a loop device still backs {storage.image}")


async def test_a_sparse_and_hard_linked_template_is_copied_as_it_is(tmp_path: Path) -> None:
    """8 GiB of holes and 40 hard links to 8 MiB fit a 64 MiB sandbox: nothing is expanded."""
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(8 * GiB)
    (tmp_path / "data").write_bytes(os.urandom(8 * MiB))
    for i in range(40):
        os.link(tmp_path / "data", tmp_path / f"link{i}")
    async with await BubblewrapSandbox.create(tmp_path, limits=BOUNDED) as box:
        res = await box.exec("stat -c '%s %h' sparse data link7")
        assert res.stdout.split("\n")[:3] == [f"{8 * GiB} 1", f"{8 * MiB} 41", f"{8 * MiB} 41"]
        assert await usage(box) < 10 * MiB
        assert allocated(box.storage.image) < 10 * MiB  # type: ignore[union-attr]


async def test_a_template_larger_than_the_storage_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(os.urandom(1 << 20) * 80)
    with pytest.raises(ConfigError, match="does not fit in the sandbox's storage"):
        await BubblewrapSandbox.create(tmp_path, limits=BOUNDED)


def test_without_a_filesystem_of_its_own_each_file_is_bounded_by_the_storage(tmp_path) -> None:
    """The fallback without root: RLIMIT_FSIZE is the smaller of the two limits."""
    from envlab.sandbox.storage import Storage

    unbounded = Storage(tmp_path, "dir")
    assert unbounded.rlimit_fsize(BOUNDED.model_copy(update={"max_file_bytes": GiB})) == LIMIT
    assert unbounded.rlimit_fsize(Limits(max_file_bytes=MiB << 4)) == MiB << 4
    assert Storage(tmp_path, "ext4").rlimit_fsize(BOUNDED) == BOUNDED.max_file_bytes


def test_limits_bound_storage_sensibly() -> None:
    with pytest.raises(ValueError):
        Limits(storage_bytes=1024)  # below any filesystem
    with pytest.raises(ValueError):
        Limits(storage_bytes=1 << 60)  # absurd: refused, not a crash at the first command
    assert Limits(storage_bytes=LIMIT, max_inodes=1000).max_inodes == 1000
    with pytest.raises(ValueError, match="set storage_bytes too"):
        Limits(max_inodes=1000)
