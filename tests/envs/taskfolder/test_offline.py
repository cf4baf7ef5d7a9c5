"""Offline grading toolkit: the scanner, the POSIX sh curl/wget shims (run by /bin/sh), fetch_uv
against a real local package index on 127.0.0.1, the warm-up script's shape."""

from __future__ import annotations

import base64
import hashlib
import http.server
import subprocess
import sys
import threading
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from envlab.core.errors import ConfigError
from envlab.sandbox.tasks.offline import (
    OfflineCacheError,
    fetch_uv,
    offline_env,
    offline_path,
    read_needs_network,
    warmup_script,
    wheel_platform,
    write_offline_kit,
)
from envlab.sandbox.tasks.offline_scan import scan_needs

UV_URL = "https://astral.sh/uv/0.7.13/install.sh"


# ---------------------------------------------------------------- scanner
def test_scan_covers_each_form(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "requirements.txt").write_text("# deps\nrequests==2.32.4\n--extra-index-url X\n")
    (tests / "setup.sh").write_text(
        "apt-get update; apt-get install -y --no-install-recommends curl git\n"
        "curl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n"
        "source $HOME/.local/bin/env\nuv init\nuv add pytest==8.4.1\n"
    )
    (tests / "test.sh").write_text(
        "#!/bin/bash\nsource $TEST_DIR/setup.sh\n"
        "wget -qO- https://astral.sh/uv/install.sh | sh  # comment uv add nope\n"
        "uv add \\\n    numpy==2.3.1 \\\n    'pillow>=11'\n"
        'uv pip install "scipy==1.16" && uvx --with pytest-cov ruff==0.5.0 check .\n'
        "uv run --with hypothesis pytest -rA\nuv python pin 3.11\n"
        "pip install pytest==8.4.1 -r $TEST_DIR/requirements.txt 2>&1\n"
        "python3 -m pip install -e . torch==2.7.1 --index-url https://download.pytorch.org/whl/cpu\n"
        "DEBIAN_FRONTEND=noninteractive apt -y install python3-pil=1.2 >/dev/null\n"
        "cat > x.py <<'EOF'\npip install not-a-command\nEOF\n"
        "curl -s https://example.com/data.csv -o data.csv\n"
    )
    needs = scan_needs(tests)
    assert needs.uv_versions == ["latest", "0.7.13"]
    assert needs.uv_requirements == [
        "pytest==8.4.1",
        "numpy==2.3.1",
        "pillow>=11",
        "scipy==1.16",
        "ruff==0.5.0",
        "pytest-cov",
        "hypothesis",
    ]
    assert needs.pip_requirements == ["pytest==8.4.1", "requests==2.32.4", "torch==2.7.1"]
    assert needs.apt_packages == ["curl", "git", "python3-pil=1.2"]
    assert needs.uv_pythons == ["3.11"]
    assert needs.local_installs == ["."]
    assert needs.urls == ["https://download.pytorch.org/whl/cpu", "https://example.com/data.csv"]
    torch = next(i for i in needs.installs if "torch==2.7.1" in i.requirements)
    assert torch.index_options == ["--index-url", "https://download.pytorch.org/whl/cpu"]
    uvx = next(i for i in needs.installs if i.tool == "uvx")
    assert uvx.requirements == ["ruff==0.5.0"] and uvx.with_requirements == ["pytest-cov"]
    # setup.sh is followed where test.sh sources it: its uv add comes first
    assert needs.installs[0].requirements == ["pytest==8.4.1"]


def test_scan_tb1_layout_and_uvx_from(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    run = tmp_path / "run-tests.sh"
    run.write_text("uvx pytest==8.4.1 /tests -rA\nuvx --from 'black==24.1' black --check .\n")
    needs = scan_needs(tmp_path / "tests", run)
    assert needs.uv_requirements == ["pytest==8.4.1", "black==24.1"]
    assert needs.scripts == ["run-tests.sh"]


# ---------------------------------------------------------------- shims
FAKE_UV = '#!/bin/sh\necho "uv 9.9.9 (fake)"\n'


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    cached = tmp_path / "cache" / "uv" / "0.7.13"
    cached.mkdir(parents=True)
    (cached / "uv").write_text(FAKE_UV)
    (cached / "uvx").write_text('#!/bin/sh\necho "uvx fake"\n')
    dest = tmp_path / "kit"
    write_offline_kit(dest, {"0.7.13": cached}, mount=str(dest))
    return dest


def sh(script: str, kit: Path, home: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {
        "HOME": str(home),
        "PATH": offline_path("/usr/bin:/bin", mount=str(kit)),
        "ENVLAB_OFFLINE_REPORT": str(home / "report.txt"),
    }
    return subprocess.run(
        ["/bin/sh", "-c", script], env=env, cwd=cwd or home, capture_output=True, text=True
    )


def test_curl_pipe_sh_installs_cached_uv(kit: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    res = sh(f'curl -LsSf {UV_URL} | sh && . "$HOME/.local/bin/env" && uv --version', kit, home)
    assert res.returncode == 0, res.stderr
    assert "uv 9.9.9 (fake)" in res.stdout
    assert (home / ".local" / "bin" / "uvx").is_file()
    # the env snippet is idempotent and plain sh
    res = sh('. "$HOME/.local/bin/env"; . "$HOME/.local/bin/env"; echo "$PATH"', kit, home)
    assert res.stdout.count(".local/bin") == 1


@pytest.mark.parametrize(
    "cmd",
    [
        f"curl -o inst.sh {UV_URL}",
        f"curl --proto '=https' --tlsv1.2 -H 'X: y' -sSfo inst.sh {UV_URL}",
        f"curl -sSL --output=inst.sh {UV_URL}",
        f"wget -qO inst.sh {UV_URL}",
        f"wget -q --output-document inst.sh {UV_URL}",
        f"wget -q -O- {UV_URL} > inst.sh",
        f"curl -LsSf {UV_URL} > inst.sh",
    ],
)
def test_installer_to_file_forms(kit: Path, tmp_path: Path, cmd: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    script = f'{cmd} && UV_INSTALL_DIR="$HOME/tools" sh inst.sh && "$HOME/tools/uv" --version'
    res = sh(script, kit, home)
    assert res.returncode == 0, res.stderr
    assert "uv 9.9.9 (fake)" in res.stdout


def test_remote_name_and_latest(kit: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    res = sh(
        "curl -LO https://astral.sh/uv/install.sh && XDG_BIN_HOME=$HOME/x sh install.sh "
        "&& $HOME/x/uv --version && wget https://astral.sh/uv/install.sh",
        kit,
        home,
    )
    assert res.returncode == 0, res.stderr
    assert "uv 9.9.9 (fake)" in res.stdout and (home / "x" / "env").is_file()


@pytest.mark.parametrize(
    ("cmd", "code"),
    [
        ("curl -fsSL https://example.com/data.csv -o d.csv", 6),
        ("wget -q https://example.com/data.csv", 4),
    ],
)
def test_unknown_url_fails_and_is_reported(kit: Path, tmp_path: Path, cmd: str, code: int) -> None:
    home = tmp_path / "home"
    home.mkdir()
    res = sh(cmd, kit, home)
    url = cmd.split("https://")[1].split()[0]
    assert res.returncode == code
    assert f"cannot fetch https://{url} (needs the network)" in res.stderr
    assert read_needs_network(home / "report.txt") == [f"https://{url}"]


def test_uncached_uv_version_exits_6(kit: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    res = sh("curl -LsSf https://astral.sh/uv/0.1.0/install.sh", kit, home)
    assert res.returncode == 6 and "uv 0.1.0 is not in envlab's offline cache" in res.stderr


def test_loopback_goes_to_real_curl_and_no_url_runs_it(kit: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    fake_bin = home / "realbin"
    fake_bin.mkdir(parents=True)
    (fake_bin / "curl").write_text('#!/bin/sh\necho "real curl: $*"\n')
    (fake_bin / "curl").chmod(0o755)
    env_path = offline_path(f"{fake_bin}:/usr/bin:/bin", mount=str(kit))
    for args in ("-s http://127.0.0.1:8000/health", "--version", "http://localhost/x"):
        res = subprocess.run(
            ["/bin/sh", "-c", f"curl {args}"],
            env={"HOME": str(home), "PATH": env_path},
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0 and res.stdout == f"real curl: {args}\n", res.stderr
    assert read_needs_network(home / "report.txt") == []


def test_fallback_uv_for_images_without_uv(kit: Path, tmp_path: Path) -> None:
    res = sh("uvx --version; uv --version", kit, tmp_path)
    assert res.stdout == "uvx fake\nuv 9.9.9 (fake)\n"


# ---------------------------------------------------------------- fetch_uv
def test_fetch_uv_from_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "uv").mkdir(parents=True)
    binary = tmp_path / "bin" / "uv"
    binary.parent.mkdir()
    binary.write_text(FAKE_UV)
    (site / "uv" / "__init__.py").write_text(f"def find_uv_bin():\n    return {str(binary)!r}\n")
    (site / "uv-0.0.7.dist-info").mkdir()
    (site / "uv-0.0.7.dist-info" / "METADATA").write_text("Name: uv\nVersion: 0.0.7\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "uv", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")  # a download would fail
    got = fetch_uv("0.0.7", tmp_path / "cache")
    assert got == tmp_path / "cache" / "uv" / "0.0.7"
    assert subprocess.run([got / "uv"], capture_output=True, text=True).stdout.startswith("uv 9")
    assert (got / "uvx").stat().st_mode & 0o111


def _wheel(dest: Path, version: str) -> Path:
    """A valid wheel of 'uv' with its binaries in uv-<version>.data/scripts/."""
    name = f"uv-{version}-py3-none-{wheel_platform()}.whl"
    files = {
        f"uv-{version}.data/scripts/uv": FAKE_UV.encode(),
        f"uv-{version}.data/scripts/uvx": b'#!/bin/sh\necho "uvx fake"\n',
        f"uv-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: uv\nVersion: {version}\n".encode()
        ),
        f"uv-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: envlab-test\n"
        b"Root-Is-Purelib: false\nTag: py3-none-" + wheel_platform().encode() + b"\n",
    }
    record = f"uv-{version}.dist-info/RECORD"
    lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    files[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
    with zipfile.ZipFile(dest / name, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
    return dest / name


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    root = tmp_path / "index"
    (root / "simple" / "uv").mkdir(parents=True)
    (root / "files").mkdir()
    links = [_wheel(root / "files", v).name for v in ("0.5.1", "0.6.2")]
    html = "".join(f'<a href="../../files/{n}">{n}</a>\n' for n in links)
    (root / "simple" / "uv" / "index.html").write_text(f"<html><body>{html}</body></html>")
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw) -> None:
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, fmt: str, *args: object) -> None:
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pipcache"))
    for var in ("PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    try:
        yield requests
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_uv_downloads_from_local_index(tmp_path: Path, index: list[str]) -> None:
    cache = tmp_path / "cache"
    got = fetch_uv("0.5.1", cache)
    assert got == cache / "uv" / "0.5.1"
    res = subprocess.run([got / "uvx"], capture_output=True, text=True)
    assert res.stdout == "uvx fake\n"
    n = len(index)
    assert fetch_uv("0.5.1", cache) == got and len(index) == n  # cached: no request
    latest = fetch_uv("latest", cache)
    assert latest == cache / "uv" / "0.6.2"
    assert (cache / "uv" / "LATEST").read_text() == "0.6.2\n"
    n = len(index)
    assert fetch_uv("latest", cache) == latest and len(index) == n
    assert not [p for p in (cache / "uv").iterdir() if p.name.startswith(".tmp")]


def test_fetch_uv_failure_names_the_version(tmp_path: Path, index: list[str]) -> None:
    with pytest.raises(OfflineCacheError, match=r"could not download uv 0\.9\.99"):
        fetch_uv("0.9.99", tmp_path / "cache")
    assert not (tmp_path / "cache" / "uv" / "0.9.99").exists()
    with pytest.raises(ConfigError, match="not a version"):
        fetch_uv("../x", tmp_path / "cache")


# ---------------------------------------------------------------- env and warm-up
def test_offline_env() -> None:
    env = offline_env()
    assert env["UV_OFFLINE"] == "1" and env["PIP_NO_INDEX"] == "1"
    assert env["UV_PYTHON_DOWNLOADS"] == "never"
    assert env["PIP_FIND_LINKS"] == "/opt/envlab/offline/wheels"
    assert offline_path("/usr/bin").startswith("/opt/envlab/offline/bin:/usr/bin")


def test_warmup_script_shape(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(
        "apt-get install -y curl\ncurl -LsSf https://astral.sh/uv/0.7.13/install.sh | sh\n"
        "uv add pytest==8.4.1\npip install 'requests==2.32.4'\nuvx --with pytest-cov pytest\n"
    )
    script = warmup_script(scan_needs(tests), "0.7.13")
    assert "step apt envlab_apt curl" in script
    assert "Keep-Downloaded-Packages=true" in script
    assert "step uv-add-1 envlab_uv add  pytest==8.4.1" in script
    assert "step uv-add-2 envlab_uv add  requests==2.32.4" in script
    assert "step pip-wheels-2 envlab_pip_wheels  requests==2.32.4" in script
    assert "envlab_uvx pytest  --with pytest-cov --from pytest" in script
    assert "/opt/envlab/offline/uv/0.7.13/uv" in script
    assert subprocess.run(["/bin/sh", "-n", "-c", script]).returncode == 0


def test_warmup_steps_fail_without_stopping(tmp_path: Path) -> None:
    """Run by /bin/sh with no uv and no apt: every step fails, the summary still prints."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text("uv add pytest==8.4.1\n")
    script = warmup_script(scan_needs(tests), "0.7.13", mount=str(tmp_path / "nokit"))
    res = subprocess.run(
        ["/bin/sh", "-c", script],
        env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0
    last = res.stdout.strip().splitlines()[-1]
    assert last == "envlab warm-up: 0 steps ok, 3 failed: uv-init uv-add-1 uv-sync"
