"""The network of a ``public`` sandbox: a network namespace of its own, joined to the outside by
pasta (passt's user-space network stack), so that the sandbox never shares the host's.

Every sandbox runs with ``--unshare-net``: its loopback is its own, and so are its abstract unix
sockets (they belong to a network namespace). A public one also gets a ``Pasta``: started by the
start gate (sandbox/gate.py) on the namespace of bwrap's child while the command waits on
``--block-fd``, released once pasta has configured the namespace, stopped when the command (or
the shared sandbox) ends. pasta's connections leave from the host as the host's own, but:

- ``--no-map-gw``: the gateway's address is the real gateway, never the host's 127.0.0.1 (pasta's
  default maps it there);
- ``-t none -u none -T none -U none``: no port is forwarded either way, with one exception: the
  loopback ports named by the host's own proxy and package-index settings (``http_proxy``,
  ``PIP_INDEX_URL``, ...: a mirror or an egress proxy on the host's loopback) are forwarded
  (``-T``), at the same address inside, so that those settings work there as on the host;
- DNS: the sandbox's ``/etc/resolv.conf`` names ``RESOLVER``; pasta forwards what is sent there to
  the host's first nameserver, a loopback one (systemd-resolved's 127.0.0.53) included.

pasta runs as the user envlab runs as (root: ``--runas 0``, a root-owned network namespace cannot
be entered by ``nobody``), keeps only ``CAP_SYS_ADMIN`` and ``CAP_NET_BIND_SERVICE``, in an empty
mount namespace under its own seccomp filter; it dies with envlab (``setpriv --pdeathsig``). The
namespace is handed over as an open file descriptor (``/proc/self/fd/N``): pasta drops its
capabilities before opening the path, and ``/proc/PID/ns/net`` of a root process is then closed
to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import os
import select
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from envlab.core.errors import ConfigError
from envlab.sandbox.base import SandboxError
from envlab.sandbox.workspace import state_dir

RESOLVER = "169.254.1.1"
"""The nameserver a public sandbox sees (link-local, routed to pasta, forwarded by it)."""
READY_TIMEOUT_S = 30.0
"""How long pasta may take to configure a namespace before the command fails (infra error)."""
PROXY_VARS = ("http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
              "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_DEFAULT_INDEX",
              "UV_EXTRA_INDEX_URL", "UV_INDEX")  # fmt: skip
"""The host's proxies and package indexes (a mirror): what a public sandbox may reach on the
host's loopback, and what an image's network steps inherit (sandbox/image/runner.py)."""
_URL_VARS = tuple(v for v in PROXY_VARS if "no_proxy" not in v.lower())
_DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080, "socks4": 1080}


def _is_loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def loopback_ports(env: Mapping[str, str]) -> tuple[int, ...]:
    """The TCP ports on the host's loopback that ``env``'s proxy and index settings name."""
    ports: set[int] = set()
    for var in _URL_VARS:
        for word in env.get(var, "").split():
            url = word.split("=", 1)[1] if "=" in word.split("://")[0] else word  # UV_INDEX
            try:
                parts = urlsplit(url if "://" in url else f"http://{url}")
                port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
            except ValueError:
                continue
            if parts.hostname and port and _is_loopback(parts.hostname):
                ports.add(port)
    return tuple(sorted(ports))


def _ipv4_default_route() -> bool:
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return False
    return any(line.split()[1:2] == ["00000000"] for line in lines)


def resolv_conf() -> Path:
    """The ``/etc/resolv.conf`` of a public sandbox: ``RESOLVER``, and the host's search list
    and options (as Docker copies them)."""
    kept = []
    with contextlib.suppress(OSError):
        for line in Path("/etc/resolv.conf").read_text(errors="replace").splitlines():
            if line.split()[:1] in (["search"], ["domain"], ["options"]):
                kept.append(line.strip())
    body = "".join(f"{line}\n" for line in [f"nameserver {RESOLVER}", *kept])
    path = state_dir() / f"resolv-{hashlib.sha256(body.encode()).hexdigest()[:12]}.conf"
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}")
        tmp.write_text(body)
        tmp.chmod(0o644)
        tmp.rename(path)
    return path


class PublicNetwork:
    """How a public sandbox's commands reach the outside: made once per sandbox (``from_host``
    fails, naming the package to install, where pasta is missing), one ``Pasta`` per network
    namespace (``stack()``). ``settled()``, when the sandbox closes, stops any pasta of it still
    running and waits until every one has exited."""

    def __init__(self, pasta: str, forward: tuple[int, ...] = (), ipv4_only: bool = False) -> None:
        self.pasta = pasta
        self.forward = forward
        """Loopback TCP ports of the host's proxy and index settings, forwarded (see the
        module)."""
        self.ipv4_only = ipv4_only
        """IPv4 only, as Docker's default network is, where the host has an IPv4 default route
        (pasta is ready about 6 ms sooner without IPv6's socket pools)."""
        self.running: set[Pasta] = set()
        self.exiting: set[asyncio.Future[None]] = set()

    @classmethod
    def from_host(cls, env: Mapping[str, str] | None = None) -> PublicNetwork:
        binary = shutil.which("pasta")
        if binary is None:
            raise ConfigError(
                "network_mode 'public' gives the sandbox the outside network through pasta, a "
                "user-space network stack, and pasta is not installed: install the Debian "
                "package 'passt' (`apt-get install passt`), or set the phase's network_mode to "
                "'no-network'"
            )
        env = os.environ if env is None else env
        return cls(binary, loopback_ports(env), ipv4_only=_ipv4_default_route())

    def stack(self) -> Pasta:
        return Pasta(self)

    async def settled(self) -> None:
        for stack in list(self.running):
            stack.stop()
        while self.exiting:
            await asyncio.wait(list(self.exiting))


class Pasta:
    """One pasta on one network namespace: ``start(pid)`` (the namespace of ``pid``), then
    ``await ready()`` or ``wait_ready()`` before the command runs, ``stop()`` when it has ended.
    Readiness is pasta's PID file, a pipe here: pasta writes it once the namespace's interface,
    addresses and routes are set; it closes unwritten when pasta exits first."""

    def __init__(self, network: PublicNetwork) -> None:
        self.network = network
        self.proc: subprocess.Popen[bytes] | None = None
        self._ready_fd: int | None = None
        self._log: IO[bytes] | None = None
        self._waiting: tuple[asyncio.AbstractEventLoop, asyncio.Future[bytes]] | None = None

    def argv(self, netns_fd: int, ready_fd: int, userns_fd: int | None) -> list[str]:
        a = ["setpriv", "--pdeathsig", "KILL", "--", self.network.pasta]
        if os.geteuid() == 0:
            a += ["--runas", "0"]
        a += ["--foreground", "--quiet", "--config-net", "--no-map-gw", "--no-netns-quit"]
        if self.network.ipv4_only:
            a.append("--ipv4-only")
        tcp_out = ",".join(map(str, self.network.forward)) or "none"
        a += ["-t", "none", "-u", "none", "-T", tcp_out, "-U", "none"]
        a += ["--dns-forward", RESOLVER, "--pid", f"/proc/self/fd/{ready_fd}"]
        if userns_fd is not None:
            a += ["--userns", f"/proc/self/fd/{userns_fd}"]
        return [*a, "--netns", f"/proc/self/fd/{netns_fd}"]

    def start(self, pid: int) -> None:
        """Start pasta on the network namespace of ``pid`` (``ProcessLookupError`` when ``pid``
        is gone)."""
        fds: list[int] = []
        try:
            try:
                fds.append(os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC))
                userns = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                raise ProcessLookupError(pid) from None
            if os.fstat(userns).st_ino == os.stat("/proc/self/ns/user").st_ino:
                os.close(userns)  # ours: nothing to join (root)
                userns = None
            else:  # bwrap's own user namespace (rootless): pasta joins it to enter the netns
                fds.append(userns)
            r, w = os.pipe2(os.O_CLOEXEC)
            self._ready_fd = r
            fds.append(w)
            self._log = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop)
            self.proc = subprocess.Popen(
                self.argv(fds[0], w, userns), stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=self._log, pass_fds=fds,
            )  # fmt: skip
            self.network.running.add(self)
        except BaseException:
            self.stop()
            raise
        finally:
            for fd in fds:
                os.close(fd)

    async def ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Wait, on the event loop, until pasta has configured the namespace."""
        assert self._ready_fd is not None
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        fd = self._ready_fd
        self._waiting = (loop, fut)
        loop.add_reader(fd, lambda: fut.done() or fut.set_result(_read(fd)))  # readable: no wait
        try:
            line = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            line = None
        finally:
            self._unwatch()
        self._check(line)

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """``ready`` for a caller off the event loop (blocking)."""
        assert self._ready_fd is not None
        readable, _, _ = select.select([self._ready_fd], [], [], timeout)
        self._check(_read(self._ready_fd) if readable else None)

    def _check(self, line: bytes | None) -> None:
        """``line``: what the PID file got; empty when pasta exited, ``None`` on a timeout."""
        if line:
            return
        why = "did not configure the sandbox's network in time" if line is None else "exited"
        log = b""
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            if self._log is not None and self.proc is not None and self.proc.wait(1) is not None:
                self._log.seek(0)
                log = self._log.read()[-2000:]
        said = [x for x in log.decode(errors="replace").splitlines() if "syslog" not in x]
        raise SandboxError(
            f"pasta, the network stack of a public sandbox, {why} ({' '.join(said) or 'no output'})"
            f". Check it on this host: `unshare --net --fork sleep 60 & {self.network.pasta} "
            "--config-net --netns /proc/$!/ns/net` as envlab's user"
        )

    def _unwatch(self) -> None:
        if self._waiting is not None and self._ready_fd is not None:
            loop, fut = self._waiting
            self._waiting = None
            loop.remove_reader(self._ready_fd)
            fut.cancel()

    def stop(self) -> None:
        """Kill pasta; idempotent. Its exit takes milliseconds (the kernel removes its tap
        device): on the event loop it is reaped when it comes (``PublicNetwork.settled``
        waits for that), off it here and now."""
        self._unwatch()
        self.network.running.discard(self)
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                proc.wait()
            else:
                _reap_later(loop, proc, self.network.exiting)
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _reap_later(
    loop: asyncio.AbstractEventLoop,
    proc: subprocess.Popen[bytes],
    pending: set[asyncio.Future[None]],
) -> None:
    """Reap the killed ``proc`` once it has exited, from ``loop`` (a pidfd read)."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError:  # gone already, or no pidfd: reap it now
        proc.wait()
        return
    done: asyncio.Future[None] = loop.create_future()
    pending.add(done)

    def exited() -> None:
        if proc.poll() is None:
            return
        loop.remove_reader(pidfd)
        os.close(pidfd)
        pending.discard(done)
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, exited)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 64)
    except OSError:
        return b""
