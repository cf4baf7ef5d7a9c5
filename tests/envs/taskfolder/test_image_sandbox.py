"""ImageSandbox over the tiny base: root inside, writes in its own upper layer, no network,
Docker's capabilities, a PID namespace per command, kill_all and timeouts that leave nothing."""

from __future__ import annotations

import asyncio
import shlex
import socket
import threading
from pathlib import Path

import pytest

from envlab.sandbox import Limits, SandboxError
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import (
    LIMITS,
    needs_image_host,
    tiny_image,
)

# the session's fixtures (a private ENVLAB_CACHE_DIR, the tiny base)
image_cache = image_support.image_cache
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host
CAP_SYS_ADMIN = 21


@pytest.fixture
def image(tiny_rootfs: Path) -> Image:
    return tiny_image(tiny_rootfs)


async def _box(image: Image, **options: object) -> ImageSandbox:
    options.setdefault("limits", LIMITS)
    return await ImageSandbox.create(image=image, **options)  # type: ignore[arg-type]


async def _sh(box: ImageSandbox, cmd: str, timeout: float = 30) -> tuple[int, str, str]:
    res = await box.exec(["bash", "-c", cmd], timeout=timeout)
    return res.exit_code, res.stdout, res.stderr


def test_default_limits_are_enough(image: Image) -> None:
    """``ImageSandbox.create(image=...)`` with no limits works (its own default bounds)."""

    async def go() -> str:
        box = await ImageSandbox.create(image=image)
        try:
            return (await _sh(box, "id -u"))[1]
        finally:
            await box.close()

    assert asyncio.run(go()) == "0\n"


def test_root_inside_and_writes_persist_in_the_upper_layer(image: Image) -> None:
    async def go() -> None:
        box = await _box(image)
        try:
            assert await _sh(box, "id -u; id -g") == (0, "0\n0\n", "")
            assert (await _sh(box, "echo hi > /etc/x && mkdir -p /srv && echo s > /srv/f"))[0] == 0
            assert (await _sh(box, "cat /etc/x /srv/f"))[1] == "hi\ns\n"
            assert (box.upper / "etc" / "x").read_text() == "hi\n"
            assert not (image.base / "etc" / "x").exists()
            fresh = await _box(image)
            try:
                code, _, _ = await _sh(fresh, "test -e /etc/x")
                assert code == 1
            finally:
                await fresh.close()
        finally:
            await box.close()

    asyncio.run(go())


def test_close_removes_the_storage(image: Image) -> None:
    async def go() -> Path:
        box = await _box(image)
        await _sh(box, "echo data > /root/f")
        assert box.storage is not None
        root = box.storage.root
        assert root.exists()
        await box.close()
        with pytest.raises(SandboxError):
            await _sh(box, "true")
        return root

    assert not asyncio.run(go()).exists()


def test_no_network(image: Image) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    port = server.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                conn.sendall(b"hello")
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    probe = (
        "import socket,sys\n"
        "s=socket.socket(); s.settimeout(3)\n"
        "try:\n s.connect((sys.argv[1], int(sys.argv[2]))); print('connected', s.recv(5))\n"
        "except OSError as e:\n print('refused', type(e).__name__)\n"
    )

    async def go() -> tuple[str, str, str]:
        off = await _box(image)
        on = await _box(image, network=True)
        try:
            await _sh(off, f"cat > /probe.py <<'EOF'\n{probe}EOF")
            await _sh(on, f"cat > /probe.py <<'EOF'\n{probe}EOF")
            external = (await _sh(off, "python3 /probe.py 1.1.1.1 80"))[1]
            host_off = (await _sh(off, f"python3 /probe.py 127.0.0.1 {port}"))[1]
            host_on = (await _sh(on, f"python3 /probe.py 127.0.0.1 {port}"))[1]
            return external, host_off, host_on
        finally:
            await off.close()
            await on.close()

    try:
        external, host_off, host_on = asyncio.run(go())
    finally:
        stop.set()
        t.join()
        server.close()
    assert external.startswith("refused")
    assert host_off.startswith("refused")
    assert host_on.startswith("refused")  # network=True: the outside through pasta, never the host


def test_docker_posture_no_sys_admin_no_mount_proc_sys_read_only(image: Image) -> None:
    async def go() -> tuple[str, int, int, int]:
        box = await _box(image)
        try:
            caps = (await _sh(box, "grep CapEff /proc/self/status"))[1]
            mount = (await _sh(box, "mkdir -p /mnt/t && mount -t tmpfs none /mnt/t"))[0]
            sysctl = (await _sh(box, "echo 1 > /proc/sys/kernel/panic"))[0]
            # a file capability does not hand CAP_SYS_ADMIN back (the overlay is nosuid)
            setcap = (
                'cp /bin/mount /tmp/capmount && python3 -c "import os,struct; os.setxattr('
                "'/tmp/capmount','security.capability',struct.pack('<IIIII',0x02000001,"
                f'1<<{CAP_SYS_ADMIN},0,0,0))" ; /tmp/capmount -t tmpfs none /mnt/t'
            )
            filecap = (await _sh(box, setcap))[0]
            return caps, mount, sysctl, filecap
        finally:
            await box.close()

    caps, mount, sysctl, filecap = asyncio.run(go())
    eff = int(caps.split()[1], 16)
    assert not eff & (1 << CAP_SYS_ADMIN)
    assert mount != 0
    assert sysctl != 0
    assert filecap != 0


def test_a_background_process_dies_with_its_command(image: Image) -> None:
    async def go() -> tuple[int, str]:
        box = await _box(image)
        try:
            await _sh(box, "(sleep 3; echo late > /root/late) >/dev/null 2>&1 & echo started")
            alive = (await _sh(box, "ps -e -o comm= | grep -c sleep || true"))[1]
            await asyncio.sleep(3.5)
            return (await _sh(box, "test -e /root/late"))[0], alive
        finally:
            await box.close()

    late, alive = asyncio.run(go())
    assert alive.strip() == "0"
    assert late == 1


def test_kill_all_kills_a_running_command_and_refuses_new_ones(image: Image) -> None:
    async def go() -> None:
        box = await _box(image)
        try:
            long = asyncio.create_task(box.exec(["bash", "-c", "sleep 300"], timeout=120))
            await asyncio.sleep(0.5)
            killed = await box.kill_all()
            try:  # the killed command ends (not ok), or its exec says bwrap was killed
                res = await asyncio.wait_for(long, 20)
                assert not res.ok
            except SandboxError:
                pass
            assert killed >= 1
            assert box._cgroup is not None
            assert (box._cgroup.path / "cgroup.procs").read_text().split() == []
            with pytest.raises(SandboxError):
                await box.exec(["true"], timeout=10)
        finally:
            await box.close()

    asyncio.run(go())


def test_a_timeout_kills_every_process(image: Image) -> None:
    async def go() -> tuple[bool, int]:
        box = await _box(image, limits=Limits(memory_bytes=1 << 30))
        try:
            script = "(sleep 2; echo late > /root/late) & setsid sleep 100 & sleep 100"
            res = await box.exec(["bash", "-c", script], timeout=1)
            await asyncio.sleep(2.5)
            assert box._cgroup is not None
            procs = (box._cgroup.path / "cgroup.procs").read_text().split()
            late = (await _sh(box, "test -e /root/late"))[0]
            assert late == 1
            return res.timed_out, len(procs)
        finally:
            await box.close()

    timed_out, procs = asyncio.run(go())
    assert timed_out
    assert procs == 0


def test_chroot_works_as_in_docker_and_stays_inside(image: Image) -> None:
    """sshd's privilege separation chroots every connection (Docker allows it with
    CAP_SYS_CHROOT): a chroot works, and a chroot jail's escape reaches only the sandbox's root."""
    escape = (
        "import os\n"
        "os.makedirs('/tmp/jail', exist_ok=True)\n"
        "fd = os.open('/', os.O_RDONLY)\n"
        "os.chroot('/tmp/jail')\n"
        "os.fchdir(fd)\n"
        "for _ in range(64):\n"
        "    os.chdir('..')\n"
        "os.chroot('.')\n"
        "print('escaped to', sorted(os.listdir('/'))[:40])\n"
    )

    async def go() -> tuple[int, str, str]:
        box = await _box(image)
        try:
            return await _sh(box, f"python3 -c {shlex.quote(escape)}")
        finally:
            await box.close()

    code, out, _ = asyncio.run(go())
    assert code == 0, out
    # the "escape" lands on the sandbox's own root: the image's files, never the host's
    assert "escaped to" in out and "'etc'" in out
    assert "'work'" not in out, out
