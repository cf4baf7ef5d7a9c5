"""The agent's network never reaches the host: every sandbox has a network namespace of its own;
a public one reaches the outside through pasta (sandbox/network.py), never the host's loopback.

Real components throughout: bwrap, pasta, a TCP listener on the host's 127.0.0.1 and an abstract
unix socket of the host's, probed from host-mode, image-mode and shared sandboxes.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from envlab.core import ConfigError
from envlab.sandbox import BubblewrapSandbox, Sandbox, SandboxError
from envlab.sandbox.image.persistent import SharedImageSandbox
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image
from envlab.sandbox.network import RESOLVER, loopback_ports
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import LIMITS, needs_image_host, tiny_image
from tests.sandbox.conftest import SMALL, requires_bwrap

image_cache = image_support.image_cache
tiny_rootfs = image_support.tiny_rootfs

requires_pasta = pytest.mark.skipif(shutil.which("pasta") is None, reason="no pasta (passt)")
KINDS = ["host", "image", "shared"]
MODES = [pytest.param(False, id="no-network"), pytest.param(True, id="public")]

PROBE = r"""
import socket, sys
port, name = int(sys.argv[1]), sys.argv[2]
lines = open("/proc/net/dev").read().splitlines()[2:]
print("IFACES", " ".join(sorted(ln.split(":")[0].strip() for ln in lines)))
targets = ["127.0.0.1"]
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if f[1] == "00000000":  # the default gateway: pasta maps it to the host unless told not to
        targets.append(socket.inet_ntoa(bytes.fromhex(f[2])[::-1]))
for host in targets:
    try:
        socket.create_connection((host, port), timeout=2).close()
        print("OPEN", host)
    except OSError as e:
        print("BLOCKED", host, type(e).__name__)
u = socket.socket(socket.AF_UNIX)
try:
    u.connect("\0" + name)
    print("OPEN abstract")
except OSError as e:
    print("BLOCKED abstract", type(e).__name__)
"""


@dataclass
class HostServices:
    """A TCP listener on the host's 127.0.0.1 and a host abstract unix socket, both listening
    (a connection completes in the kernel's backlog: ``reached`` sees it without an accept
    loop)."""

    tcp: socket.socket
    unix: socket.socket
    name: str

    @property
    def port(self) -> int:
        return int(self.tcp.getsockname()[1])

    def reached(self) -> list[str]:
        """What connections arrived (accepted and closed here)."""
        got = []
        for what, srv in (("tcp", self.tcp), ("abstract", self.unix)):
            srv.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                while True:
                    conn, _ = srv.accept()
                    conn.close()
                    got.append(what)
        return got


@pytest.fixture
def host_services() -> Iterator[HostServices]:
    tcp = socket.create_server(("127.0.0.1", 0))
    name = f"envlab-test-{secrets.token_hex(6)}"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind("\0" + name)
    unix.listen(16)
    try:
        yield HostServices(tcp, unix, name)
    finally:
        tcp.close()
        unix.close()


@pytest.fixture
def image(tiny_rootfs: Path) -> Image:
    return tiny_image(tiny_rootfs)


async def _sandbox(kind: str, network: bool, request: pytest.FixtureRequest) -> Sandbox:
    if kind == "host":
        if not _bwrap():
            pytest.skip("no bubblewrap binary")
        return await BubblewrapSandbox.create(limits=SMALL, network=network, name="net")
    if os.geteuid() != 0 or not _bwrap() or not image_support.PYTHON.is_file():
        pytest.skip("image mode needs root, bubblewrap and the host's /usr/bin/python3.11")
    image = request.getfixturevalue("image")
    cls = SharedImageSandbox if kind == "shared" else ImageSandbox
    return await cls.create(image=image, limits=LIMITS, network=network, name="net")


def _bwrap() -> bool:
    from envlab.sandbox.layout import bwrap_binary

    try:
        return bool(bwrap_binary())
    except ConfigError:
        return False


def _pasta_children(parent: int | None = None) -> list[str]:
    """The children of ``parent`` (this process) that are pasta (or its wrapper, before it
    became pasta), as ``"pid comm"``."""
    parent = os.getpid() if parent is None else parent
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            text = stat.read_text()
            comm = text[text.index("(") + 1 : text.rindex(")")]
            ppid = int(text[text.rindex(")") + 2 :].split()[1])
            if ppid == parent and comm in ("pasta", "passt", "passt.avx2", "setpriv"):
                found.append(f"{stat.parent.name} {comm}")
    return found


def test_the_probe_reaches_both_services_from_the_host(host_services: HostServices) -> None:
    """The probe is not blind: run on the host, it opens both."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(host_services.port), host_services.name],
        capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    assert "OPEN 127.0.0.1" in out and "OPEN abstract" in out, out
    assert sorted(host_services.reached()) == ["abstract", "tcp"]


@pytest.mark.parametrize("network", MODES)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_sandbox_never_reaches_the_hosts_loopback_or_abstract_sockets(
    kind: str, network: bool, host_services: HostServices, request: pytest.FixtureRequest
) -> None:
    if network and shutil.which("pasta") is None:
        pytest.skip("no pasta (passt)")
    box = await _sandbox(kind, network, request)
    try:
        res = await box.exec(
            ["python3", "-c", PROBE, str(host_services.port), host_services.name], timeout=60
        )
    finally:
        await box.close()
    out = res.stdout
    assert res.exit_code == 0, res.stderr
    assert "OPEN" not in out, out
    assert "BLOCKED 127.0.0.1" in out and "BLOCKED abstract" in out, out
    assert host_services.reached() == []
    ifaces = out.split("IFACES ", 1)[1].splitlines()[0].split()
    if network:  # the stack was attached: an interface of pasta's, and a default route
        assert len(ifaces) == 2 and "lo" in ifaces, out
        assert out.count("BLOCKED") == 3, "the gateway was probed too"
    else:
        assert ifaces == ["lo"], out
    assert _pasta_children() == []


@requires_pasta
@pytest.mark.parametrize("kind", KINDS)
async def test_no_pasta_outlives_its_command_or_its_sandbox(
    kind: str, request: pytest.FixtureRequest
) -> None:
    box = await _sandbox(kind, True, request)
    try:
        for _ in range(3):
            assert (await box.exec("true")).exit_code == 0
        late = await box.exec("sleep 30", timeout=1)  # killed: its stack goes too
        assert late.timed_out
        up = await box.exec("cat /proc/net/dev")  # lo and pasta's interface
        assert len(up.stdout.splitlines()) == 4, up.stdout
        if kind == "shared":  # one stack for the holder's namespaces, as long as it lives
            assert len(_pasta_children()) == 1
    finally:
        await box.close()
    assert _pasta_children() == []


DIES = """
import asyncio, os, sys
from envlab.sandbox import BubblewrapSandbox
async def main():
    box = await BubblewrapSandbox.create(network=True, name="net")
    fifo = box.host_workdir / "started"
    os.mkfifo(fifo, 0o666)
    os.chown(fifo, box.uid, box.uid)
    print(fifo, flush=True)
    await box.exec("echo started > /app/started; sleep 120", timeout=300)
asyncio.run(main())
"""


@requires_bwrap
@requires_pasta
@pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox's uid owns the fifo: root only")
def test_pasta_dies_with_the_envlab_process_that_started_it() -> None:
    """envlab killed (SIGKILL: no cleanup of its own) mid-command: the kernel kills its pasta
    too (``setpriv --pdeathsig``), as bwrap's ``--die-with-parent`` does the sandbox."""
    proc = subprocess.Popen([sys.executable, "-c", DIES], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        fifo = proc.stdout.readline().strip()
        with open(fifo) as f:  # opens once the command runs: its network stack is up
            assert f.read().strip() == "started"
        stacks = _pasta_children(proc.pid)
        assert len(stacks) == 1, stacks
        pidfd = os.pidfd_open(int(stacks[0].split()[0]))
    finally:
        proc.kill()
        proc.wait()
    try:
        gone, _, _ = select.select([pidfd], [], [], 60)  # readable: the process has exited
        assert gone, "pasta outlived envlab"
    finally:
        os.close(pidfd)


def _host_resolves(name: str) -> bool:
    try:
        return bool(socket.getaddrinfo(name, 443, proto=socket.IPPROTO_TCP))
    except OSError:
        return False


def _host_connects(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=10).close()
        return True
    except OSError:
        return False


OUTSIDE = r"""
import socket, sys
print("RESOLV", open("/etc/resolv.conf").read().split())
print("ADDR", socket.getaddrinfo("pypi.org", 443, proto=socket.IPPROTO_TCP)[0][4][0])
if sys.argv[1] == "connect":
    socket.create_connection(("pypi.org", 443), timeout=20).close()
    print("CONNECTED")
"""


@requires_pasta
@pytest.mark.parametrize("kind", KINDS)
async def test_a_public_sandbox_resolves_names_and_reaches_the_outside(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """Where the host resolves pypi.org (and connects to it), so does a public sandbox: its
    resolver is pasta's forwarder, which asks the host's."""
    if not _host_resolves("pypi.org"):
        pytest.skip("the host itself cannot resolve pypi.org")
    connect = _host_connects("pypi.org", 443)
    box = await _sandbox(kind, True, request)
    try:
        what = "connect" if connect else "resolve"
        res = await box.exec(["python3", "-c", OUTSIDE, what], timeout=60)
    finally:
        await box.close()
    assert res.exit_code == 0, res.stderr
    assert f"'nameserver', '{RESOLVER}'" in res.stdout
    assert "ADDR " in res.stdout
    if not connect:
        pytest.skip("resolved; the host itself cannot connect to pypi.org:443")
    assert "CONNECTED" in res.stdout


LOOPBACK_RESOLVER = "127.0.0.77"
RESOLVES = """
import asyncio
from envlab.sandbox import BubblewrapSandbox
async def main():
    box = await BubblewrapSandbox.create(network=True, name="net")
    try:
        res = await box.exec(["python3", "-c", "import socket; "
                              "print(socket.gethostbyname('loopback-dns.envlab.test'))"])
        print(res.stdout.strip() or res.stderr)
    finally:
        await box.close()
asyncio.run(main())
"""


def _answer_dns(sock: socket.socket, address: str) -> None:
    """A DNS server of one name: every A question gets ``address``."""
    with contextlib.suppress(OSError):
        while True:
            query, peer = sock.recvfrom(512)
            if query == b"stop":
                return
            end = query.index(b"\0", 12) + 5  # the question: its name, type and class
            header = query[:2] + b"\x81\x80" + b"\x00\x01\x00\x01\x00\x00\x00\x00"
            answer = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04"
            sock.sendto(header + query[12:end] + answer + socket.inet_aton(address), peer)


@requires_bwrap
@requires_pasta
@pytest.mark.skipif(os.geteuid() != 0, reason="a mount namespace with another resolv.conf")
def test_a_public_sandbox_resolves_through_a_loopback_resolver_of_the_host(tmp_path: Path) -> None:
    """The host's resolv.conf names a resolver on its loopback (systemd-resolved's 127.0.0.53,
    say): the sandbox's queries reach it through pasta's DNS forwarder."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        server.bind((LOOPBACK_RESOLVER, 53))
    except OSError as e:
        server.close()
        pytest.skip(f"cannot listen on {LOOPBACK_RESOLVER}:53: {e}")
    thread = threading.Thread(target=_answer_dns, args=(server, "192.0.2.123"), daemon=True)
    thread.start()
    conf = tmp_path / "resolv.conf"
    conf.write_text(f"nameserver {LOOPBACK_RESOLVER}\n")
    try:
        out = subprocess.run(
            ["unshare", "--mount", "--", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && '
             'exec "$@"', str(conf), sys.executable, "-c", RESOLVES],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.sendto(b"stop", server.getsockname())
        thread.join()
        server.close()
    assert out.stdout.strip() == "192.0.2.123", out.stdout + out.stderr


@requires_bwrap
@requires_pasta
async def test_only_the_loopback_port_of_the_hosts_proxy_setting_is_forwarded(
    monkeypatch: pytest.MonkeyPatch, host_services: HostServices
) -> None:
    """A proxy (or index mirror) the host's own settings name on its loopback stays usable from
    a public sandbox, at the same address; every other loopback port stays closed."""
    proxy = socket.create_server(("127.0.0.1", 0))
    proxy.settimeout(60)
    port = proxy.getsockname()[1]

    def answer() -> None:
        with contextlib.suppress(OSError):
            conn, _ = proxy.accept()
            conn.sendall(b"proxy")
            conn.close()

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    box = await BubblewrapSandbox.create(limits=SMALL, network=True, name="net")
    try:
        got = await box.exec(
            ["python3", "-c", "import socket,sys; s=socket.create_connection(('127.0.0.1', "
             "int(sys.argv[1])), timeout=20); print(s.recv(5).decode())", str(port)],
            timeout=60,
        )  # fmt: skip
        other = await box.exec(
            ["python3", "-c", PROBE, str(host_services.port), host_services.name], timeout=60
        )
    finally:
        await box.close()
        proxy.close()
        thread.join()
    assert got.stdout.strip() == "proxy", got.stderr
    assert "OPEN" not in other.stdout and host_services.reached() == []


def test_loopback_ports_come_from_the_proxy_and_index_settings_only() -> None:
    env = {
        "http_proxy": "http://127.0.0.1:3128",
        "HTTPS_PROXY": "localhost:8443",
        "PIP_EXTRA_INDEX_URL": "https://pypi.org/simple http://[::1]:3141/simple",
        "UV_INDEX": "mirror=http://127.0.0.2:8080/simple other=https://example.org/simple",
        "UV_DEFAULT_INDEX": "https://127.0.0.1/simple",
        "no_proxy": "127.0.0.1:9999",
        "OTHER_URL": "http://127.0.0.1:7777",
    }
    assert loopback_ports(env) == (443, 3128, 3141, 8080, 8443)
    assert loopback_ports({"http_proxy": "http://10.0.0.1:3128"}) == ()


def _path_without_pasta(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """PATH: every program of the current PATH but pasta."""
    for d in os.environ["PATH"].split(os.pathsep):
        with contextlib.suppress(OSError):
            for entry in os.scandir(d):
                link = tmp_path / entry.name
                if entry.name != "pasta" and not link.exists():
                    link.symlink_to(entry.path)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert shutil.which("pasta") is None and shutil.which("rm") is not None


@requires_bwrap
async def test_a_public_phase_without_pasta_is_a_config_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _path_without_pasta(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="passt"):
        await BubblewrapSandbox.create(limits=SMALL, network=True, name="net")
    box = await BubblewrapSandbox.create(limits=SMALL, network=False, name="net")
    try:  # a phase without the network does not need pasta
        assert (await box.exec("true")).exit_code == 0
    finally:
        await box.close()


@needs_image_host
def test_a_public_image_sandbox_without_pasta_is_a_config_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, image: Image
) -> None:
    _path_without_pasta(monkeypatch, tmp_path)
    with pytest.raises(ConfigError, match="apt-get install passt"):
        ImageSandbox(image=image, limits=LIMITS, network=True)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_command_whose_network_stack_fails_never_runs(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """pasta exits instead of configuring the namespace: the command fails as the sandbox's
    (an infra error naming pasta's words), without having run."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _path_without_pasta(monkeypatch, bin_dir)
    fake = bin_dir / "pasta"
    fake.write_text("#!/bin/sh\necho 'pasta: no tap for you' >&2\nexit 1\n")
    fake.chmod(0o755)
    box = await _sandbox(kind, True, request)
    try:
        with pytest.raises(SandboxError, match="no tap for you"):
            await box.exec("touch ran")  # in the workdir: /app, or the image's /
        assert not (box.host_workdir / "ran").exists()
    finally:
        await box.close()
    assert _pasta_children() == []
