"""Fixtures of the image-mode tests: a tiny base root filesystem copied from the host.

``tiny_base`` builds, once per session, a root filesystem of the host's own programs (dash,
bash, coreutils, grep, sed, tar, gzip, find, setpriv, mount and Debian's python3.11, with every
shared library they load, at the same paths) and adopts it with ``register_base`` as
``FROM envlab-test/tiny:1``. ``image_cache`` points ``ENVLAB_CACHE_DIR`` at a private directory
for the session (never ``~/.cache``). Nothing here uses the network or mmdebstrap.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http.server
import io
import os
import re
import shutil
import socketserver
import subprocess
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envlab.envs.taskfolder.model import load_task_folder
from envlab.sandbox import Limits
from envlab.sandbox.image.store import Image
from envlab.sandbox.tasks.image_build import build_image

TINY = "envlab-test/tiny:1"
LIMITS = Limits(memory_bytes=1 << 30)
PROGRAMS = (
    "sh",
    "dash",
    "bash",
    "ls",
    "cat",
    "mkdir",
    "mv",
    "cp",
    "rm",
    "chmod",
    "chown",
    "echo",
    "mktemp",
    "dirname",
    "basename",
    "env",
    "id",
    "pwd",
    "sleep",
    "true",
    "false",
    "test",
    "head",
    "tail",
    "wc",
    "touch",
    "ln",
    "readlink",
    "stat",
    "sort",
    "uniq",
    "tr",
    "cut",
    "grep",
    "sed",
    "tar",
    "gzip",
    "find",
    "setpriv",
    "mount",
    "uname",
    "printf",
    "expr",
    "seq",
    "xargs",
    "timeout",
    "kill",
    "rmdir",
    "date",
    "du",
    "dd",
    "chgrp",
    "sha256sum",
    "md5sum",
    "base64",
    "nohup",
    "setsid",
    "realpath",
    "nproc",
    "hostname",
    "ps",
    "which",
    "cmp",
    "diff",
)
PYTHON = Path("/usr/bin/python3.11")
PY_LIB = Path("/usr/lib/python3.11")
_PY_SKIP = {"test", "idlelib", "tkinter", "lib2to3", "pydoc_data", "ensurepip", "turtledemo"}


def _has_bwrap() -> bool:
    from envlab.sandbox.layout import bwrap_binary

    try:
        return bool(bwrap_binary())
    except Exception:
        return False


needs_image_host = pytest.mark.skipif(
    os.geteuid() != 0 or not _has_bwrap() or not PYTHON.is_file(),
    reason="image mode needs root, bubblewrap and the host's /usr/bin/python3.11",
)


def _host_binary(name: str) -> Path | None:
    for d in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        p = Path(d) / name
        if p.is_file() or p.is_symlink():
            return p
    return None


def _libraries(binary: Path) -> set[str]:
    out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True).stdout
    found = set()
    for line in out.splitlines():
        m = re.search(r"(/\S+)\s+\(0x", line)
        if m:
            found.add(m.group(1))
    return found


def _copy_path(src: str, root: Path) -> None:
    """Copy ``src`` (and the target of each link on its way) to the same path under ``root``."""
    p = Path(os.path.realpath(Path(src).parent)) / Path(src).name  # /lib/x -> /usr/lib/x
    dest = root / p.relative_to("/")
    if dest.exists() or dest.is_symlink():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    if p.is_symlink():
        target = os.readlink(p)
        os.symlink(target, dest)
        _copy_path(os.path.normpath(os.path.join(p.parent, target)), root)
    else:
        shutil.copy2(p, dest)


def make_tiny_rootfs(root: Path) -> Path:
    """A small root filesystem at ``root``, copied from the host."""
    for top in ("lib", "lib64", "bin", "sbin"):  # merged /usr: keep the links
        link = Path("/") / top
        if link.is_symlink():
            (root / "usr" / top).mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(link), root / top)
    libs: set[str] = {"/lib64/ld-linux-x86-64.so.2"}
    for name in PROGRAMS:
        host = _host_binary(name)
        if host is None:
            continue
        _copy_path(str(host), root)
        libs |= _libraries(host.resolve())
    _copy_path(str(PYTHON), root)
    libs |= _libraries(PYTHON)
    uv = shutil.which("uv")  # the offline kit's uv runs in the image: its libraries too
    if uv is not None:
        libs |= _libraries(Path(uv))
    for lib in sorted(libs):
        _copy_path(lib, root)
    ignore = shutil.ignore_patterns(*_PY_SKIP, "config-3.11-*", "dist-packages")
    shutil.copytree(PY_LIB, root / "usr/lib/python3.11", symlinks=True, ignore=ignore)
    dynload = PY_LIB / "lib-dynload"
    for ext in dynload.glob("*.so"):
        for lib in _libraries(ext):
            _copy_path(lib, root)
    (root / "usr/bin/python3").unlink(missing_ok=True)
    os.symlink("python3.11", root / "usr/bin/python3")
    for d in ("root", "proc", "dev", "sys", "home/tester", "etc/ssl", "usr/local/bin", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "tmp").mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    os.chown(root / "home/tester", 1000, 1000)
    etc = root / "etc"
    (etc / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        "tester:x:1000:1000:tester:/home/tester:/bin/bash\n"
    )
    (etc / "group").write_text("root:x:0:\nnogroup:x:65534:\ntester:x:1000:\n")
    for name in ("hosts", "resolv.conf"):
        (etc / name).write_text("")
    (etc / "hostname").write_text("sandbox\n")
    return root


@pytest.fixture(scope="session")
def image_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """``ENVLAB_CACHE_DIR`` of the session's image tests (restored afterwards)."""
    cache = tmp_path_factory.mktemp("image-cache")
    old = os.environ.get("ENVLAB_CACHE_DIR")
    os.environ["ENVLAB_CACHE_DIR"] = str(cache)
    try:
        yield cache
    finally:
        if old is None:
            os.environ.pop("ENVLAB_CACHE_DIR", None)
        else:
            os.environ["ENVLAB_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def tiny_rootfs(image_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny base as registered in the store (its root filesystem)."""
    from envlab.sandbox.image.bases import register_base

    src = make_tiny_rootfs(tmp_path_factory.mktemp("tiny-src"))
    stored = register_base(TINY, src)
    shutil.rmtree(src, ignore_errors=True)
    return stored


@pytest.fixture(scope="session")
def tiny_base(tiny_rootfs: Path) -> str:
    """The ``FROM`` reference of the tiny base (registered for this session's cache)."""
    return TINY


def tiny_image(rootfs: Path) -> Image:
    return Image(ref=TINY, base=rootfs, key="tiny-test")


def write_task(
    root: Path,
    name: str,
    dockerfile: str,
    *,
    files: dict[str, str | bytes] | None = None,
    test_sh: str = "echo 1 > /logs/verifier/reward.txt\n",
    solve_sh: str = "true\n",
    toml: str = "",
    tests: dict[str, str] | None = None,
) -> Path:
    """A task folder ``root/name`` whose image is ``dockerfile``."""
    task = root / name
    (task / "environment").mkdir(parents=True, exist_ok=True)
    (task / "instruction.md").write_text("Do the thing.\n")
    base_toml = "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n"
    (task / "task.toml").write_text(base_toml + toml)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, body in (files or {}).items():
        p = task / "environment" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body) if isinstance(body, bytes) else p.write_text(body)
    for rel, body in {"tests/test.sh": "#!/bin/bash\n" + test_sh, **(tests or {})}.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(body)
    (task / "solution").mkdir(exist_ok=True)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve_sh)
    for p in (task / "tests" / "test.sh", task / "solution" / "solve.sh"):
        p.chmod(0o755)
    return task


class Events:
    """A progress callback of ``build_image`` that records ``(what, cached)``."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bool]] = []

    def __call__(self, what: str, cached: bool, _seconds: float) -> None:
        self.events.append((what, cached))

    def built(self) -> list[str]:
        return [w for w, c in self.events if not c]

    def cached(self) -> list[str]:
        return [w for w, c in self.events if c]


def build(task: Path, events: Events | None = None) -> Image:
    folder = load_task_folder(task)
    return asyncio.run(build_image(folder, progress=events or Events()))


async def run_in(image: Image, command: str, **options: Any) -> tuple[int, str, str]:
    """``command`` (bash) in a fresh sandbox of ``image``: exit code, stdout, stderr."""
    from envlab.sandbox.image.sandbox import ImageSandbox

    options.setdefault("limits", LIMITS)
    box = await ImageSandbox.create(image=image, **options)
    try:
        res = await box.exec(["bash", "-c", command], timeout=60)
        return res.exit_code, res.stdout, res.stderr
    finally:
        await box.close()


def sh(image: Image, command: str, **options: Any) -> str:
    """stdout of ``command`` in ``image``; fails the test when it exits non-zero."""
    code, out, err = asyncio.run(run_in(image, command, **options))
    assert code == 0, f"{command!r} exited {code}: {err}{out}"
    return out


# --- a local package index -------------------------------------------------------------------
FAKE_PYTEST = "99.0.0"
_PYTEST_MAIN = """\
import os, sys


def main():
    if "--help" in sys.argv:
        print("usage: pytest [files]")
        return 0
    ok = os.path.exists("/app/done")
    print("fake pytest:", "1 passed" if ok else "1 failed", sys.argv[1:])
    return 0 if ok else 1
"""


def pytest_wheel(version: str, module: str, main: str) -> tuple[str, bytes]:
    """A valid wheel named ``pytest`` at ``version`` whose console script is ``module:main``
    (``main`` is the module's source)."""
    name = f"pytest-{version}-py3-none-any.whl"
    info = f"pytest-{version}.dist-info"
    files = {
        f"{module}/__init__.py": main,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: pytest\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: envlab-tests\nRoot-Is-Purelib: true\n"
        "Tag: py3-none-any\n",
        f"{info}/entry_points.txt": f"[console_scripts]\npytest = {module}:main\n",
        f"{info}/top_level.txt": f"{module}\n",
    }
    record = []
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, body in files.items():
            data = body.encode()
            zf.writestr(path, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{path},sha256={digest.decode()},{len(data)}")
        record.append(f"{info}/RECORD,,")
        zf.writestr(f"{info}/RECORD", "\n".join(record) + "\n")
    return name, buf.getvalue()


def fake_pytest_wheel() -> tuple[str, bytes]:
    """A wheel named ``pytest`` whose console script exits 0 when /app/done exists."""
    return pytest_wheel(FAKE_PYTEST, "fakepytest", _PYTEST_MAIN)


@contextlib.contextmanager
def local_index() -> Iterator[str]:
    """A PEP 503 index on 127.0.0.1 holding the fake ``pytest``; yields its /simple/ URL."""
    name, wheel = fake_pytest_wheel()
    sha = hashlib.sha256(wheel).hexdigest()
    page = (f'<html><body><a href="/files/{name}#sha256={sha}">{name}</a></body></html>').encode()
    root = b'<html><body><a href="/simple/pytest/">pytest</a></body></html>'

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            self._serve(head=True)

        def do_GET(self) -> None:
            self._serve(head=False)

        def _serve(self, head: bool) -> None:
            path = self.path.split("?")[0]
            if path in ("/simple/pytest/", "/simple/pytest"):
                body, kind = page, "text/html"
            elif path == "/simple/":
                body, kind = root, "text/html"
            elif path == f"/files/{name}":
                body, kind = wheel, "application/octet-stream"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        server.shutdown()
        server.server_close()
