"""Offline grading of real test scripts: the tools they fetch at grading time, from a local cache.

Terminal-Bench test scripts bootstrap uv (``curl -LsSf https://astral.sh/uv/0.7.13/install.sh |
sh``), then ``uv add pytest==8.4.1`` or ``pip install ...``; envlab grades with the network off.
The pieces, used by the image builder:

- :func:`~envlab.sandbox.tasks.offline_scan.scan_needs`: what the scripts fetch.
- :func:`fetch_uv`: uv and uvx of a version, from PyPI's ``uv`` wheel (or the installed ``uv``
  package), cached under ``cache/uv/<version>/``.
- :func:`write_offline_kit`: the kit mounted read-only at ``/opt/envlab/offline`` in the image:
  ``bin/curl`` and ``bin/wget`` shims (POSIX sh) that serve uv's installer from the cache and
  fail, naming the URL, on anything else; ``fallback-bin/uv``, ``uvx`` for images without uv.
- :func:`warmup_script`: run in the image with the network at build time, it fills the caches
  (apt archives, uv's cache, pip wheels) that the offline run reads.
- :func:`offline_env` / :func:`offline_path`: the verifier's environment; :func:`read_needs_network`
  reads the URLs the shims refused.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from envlab.core.errors import ConfigError, InfraError
from envlab.sandbox.tasks.offline_scan import Install, VerifierNeeds, scan_needs
from envlab.sandbox.tasks.offline_shims import UV_INSTALLER as UV_INSTALLER_SH
from envlab.sandbox.tasks.offline_shims import render_fetch_shim, render_uv_fallback

MOUNT = "/opt/envlab/offline"
_VERSION = re.compile(r"[0-9][A-Za-z0-9.+-]*")
__all__ = ["MOUNT", "Install", "OfflineCacheError", "VerifierNeeds", "fetch_uv", "offline_env"]
__all__ += ["offline_path", "read_needs_network", "scan_needs", "warmup_script"]
__all__ += ["write_offline_kit"]


class OfflineCacheError(InfraError):
    """A tool could not be put into the offline cache at build time (download failed, bad wheel)."""


def _check_version(version: str) -> None:
    if version != "latest" and not _VERSION.fullmatch(version):
        raise ConfigError(f"uv version {version!r} is not a version: use e.g. '0.7.13' or 'latest'")


def _version_key(version: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.+-]", version))


def wheel_platform() -> str:
    """PyPI's platform tag of this machine's uv wheel."""
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if arch not in {"x86_64", "aarch64"}:
        raise ConfigError(f"no uv wheel for machine {machine!r}: envlab knows x86_64 and aarch64")
    return f"manylinux_2_17_{arch}"


def fetch_uv(
    version: str, cache: Path, *, platform_tag: str | None = None, timeout: float = 600
) -> Path:
    """``cache/uv/<version>/`` holding executable ``uv`` and ``uvx``; fetched once.

    From the installed ``uv`` package when its version is the one asked, else from PyPI's
    wheel via ``pip download`` (which honours ``PIP_INDEX_URL``). ``"latest"`` is resolved once
    and remembered in ``cache/uv/LATEST``.
    """
    _check_version(version)
    root = cache / "uv"
    if version == "latest":
        with contextlib.suppress(OSError):
            known = (root / "LATEST").read_text().strip()
            if _VERSION.fullmatch(known) and _complete(root / known):
                return root / known
    elif _complete(root / version):
        return root / version
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        out = tmp / "out"
        out.mkdir()
        local = _local_uv(version)
        if local is not None:
            got = version
            _install_binaries(local, local.with_name("uvx"), out)
        else:
            got = _download_uv(version, tmp, out, platform_tag or wheel_platform(), timeout)
        final = root / got
        if not _complete(final):
            with contextlib.suppress(FileNotFoundError):
                shutil.rmtree(final)  # a partial directory from an older envlab
            try:
                os.rename(out, final)
            except OSError:
                if not _complete(final):  # another process won the race: fine if complete
                    raise
        if version == "latest":
            (tmp / "LATEST").write_text(got + "\n")
            os.replace(tmp / "LATEST", root / "LATEST")
        return final
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _complete(path: Path) -> bool:
    return all(os.access(path / name, os.X_OK) for name in ("uv", "uvx"))


def _local_uv(version: str) -> Path | None:
    """The installed ``uv`` package's binary, if it is ``version``."""
    try:
        if importlib.metadata.version("uv") != version:
            return None
        import uv  # type: ignore[import-not-found]

        found = Path(uv.find_uv_bin())
    except Exception:
        return None
    return found if found.is_file() else None


def _install_binaries(uv: Path, uvx: Path | None, out: Path) -> None:
    shutil.copyfile(uv, out / "uv")
    if uvx is not None and uvx.is_file():
        shutil.copyfile(uvx, out / "uvx")
    else:  # uvx is `uv tool run`
        (out / "uvx").write_text('#!/bin/sh\nexec "${0%/*}/uv" tool run "$@"\n')
    for name in ("uv", "uvx"):
        (out / name).chmod(0o755)


def _download_uv(version: str, tmp: Path, out: Path, platform_tag: str, timeout: float) -> str:
    spec = "uv" if version == "latest" else f"uv=={version}"
    dl = tmp / "download"
    cmd = [sys.executable, "-m", "pip", "download", spec, "--no-deps", "--only-binary=:all:"]
    cmd += ["--platform", platform_tag, "--disable-pip-version-check", "--no-input", "-d", str(dl)]
    hint = (
        f"could not download uv {version} ({spec}, platform {platform_tag}) from the package "
        "index: check that the version exists (https://pypi.org/project/uv/#history) and that "
        "the build has network to the index (PIP_INDEX_URL picks another one)"
    )
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        raise OfflineCacheError(f"{hint}; pip download ran past {timeout:g} s") from e
    wheels = sorted(dl.glob("uv-*.whl")) if dl.is_dir() else []
    if res.returncode != 0 or not wheels:
        tail = "\n".join((res.stderr or res.stdout).strip().splitlines()[-5:])
        raise OfflineCacheError(f"{hint}; pip said:\n{tail}")
    wheel = wheels[-1]
    got = wheel.name.split("-")[1]
    if not _VERSION.fullmatch(got) or (version != "latest" and got != version):
        raise OfflineCacheError(f"pip downloaded {wheel.name} when asked for uv {version}")
    try:
        with zipfile.ZipFile(wheel) as zf:
            for name in ("uv", "uvx"):
                member = f"uv-{got}.data/scripts/{name}"
                (out / name).write_bytes(zf.read(member))
                (out / name).chmod(0o755)
    except (KeyError, zipfile.BadZipFile) as e:
        msg = f"{wheel.name} holds no uv-{got}.data/scripts/uv and uvx: {e}"
        raise OfflineCacheError(msg) from e
    return got


def write_offline_kit(dest: Path, uv: dict[str, Path], *, mount: str = MOUNT) -> None:
    """Write the kit that is mounted read-only at ``mount`` in the image.

    ``uv`` maps versions to what :func:`fetch_uv` returned (a directory with ``uv`` and
    ``uvx``, or the ``uv`` binary with ``uvx`` beside it); they are copied to
    ``dest/uv/<version>/``. The unversioned installer URL gets the newest.
    """
    for version in uv:
        _check_version(version)
    copies: dict[str, Path] = {}
    for version, src in uv.items():
        binary = src / "uv" if src.is_dir() else src
        if not binary.is_file():
            raise ConfigError(f"no uv binary at {binary} for uv {version}: run fetch_uv first")
        target = dest / "uv" / version
        target.mkdir(parents=True, exist_ok=True)
        _install_binaries(binary, binary.with_name("uvx"), target)
        copies[version] = target
    pinned = sorted((v for v in copies if v != "latest"), key=_version_key)
    latest = "latest" if "latest" in copies else (pinned[-1] if pinned else "")
    for sub in ("bin", "lib", "fallback-bin", "wheels"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    (dest / "lib" / "uv-install.sh").write_text(UV_INSTALLER_SH)
    for tool in ("curl", "wget"):
        _write_exec(dest / "bin" / tool, render_fetch_shim(tool, mount, latest))
    if latest:
        for name in ("uv", "uvx"):
            _write_exec(dest / "fallback-bin" / name, render_uv_fallback(name, mount, latest))


def _write_exec(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def offline_env(mount: str = MOUNT, *, uv_cache_dir: str | None = None) -> dict[str, str]:
    """Environment variables for the offline verifier (PATH: see :func:`offline_path`).

    uv: ``UV_OFFLINE`` resolves and installs from uv's cache only (cached index pages count
    as fresh); no Python downloads; copies instead of hard links (the cache may sit on another
    layer). pip: no index, the warm-up's wheels as ``--find-links``, no version check.
    """
    env = {
        "UV_OFFLINE": "1",
        "UV_PYTHON_DOWNLOADS": "never",
        "UV_LINK_MODE": "copy",
        "UV_NO_PROGRESS": "1",
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": f"{mount}/wheels",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "ENVLAB_OFFLINE": mount,
    }
    if uv_cache_dir is not None:
        env["UV_CACHE_DIR"] = uv_cache_dir
    return env


def offline_path_prefix(mount: str = MOUNT) -> str:
    """What goes before the image's PATH: the curl/wget shims."""
    return f"{mount}/bin"


def offline_path(image_path: str, mount: str = MOUNT) -> str:
    """The verifier's PATH: shims first, the image's PATH, then uv/uvx for images without uv."""
    return f"{offline_path_prefix(mount)}:{image_path}:{mount}/fallback-bin"


def read_needs_network(report: Path) -> list[str]:
    """The URLs the shims refused (one a line in ``$ENVLAB_OFFLINE_REPORT``), first seen first."""
    try:
        lines = report.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return []
    return list(dict.fromkeys(line.strip() for line in lines if line.strip()))


def warmup_script(
    needs: VerifierNeeds,
    uv_version: str,
    *,
    mount: str = MOUNT,
    wheels_dir: str | None = None,
    workdir: str = "",
) -> str:
    """A POSIX sh script (bash runs it too) that fills the caches the offline run reads.

    Run inside the image, as root, with the network, at build time. Every step logs and goes
    on when it fails; the last line is ``envlab warm-up: N steps ok, M failed[: names]``.
    """
    _check_version(uv_version)
    q = shlex.quote
    wheels = wheels_dir or f"{mount}/wheels"
    uv = f"{mount}/uv/{uv_version}/uv"
    head = _WARMUP_HEAD.replace("@UV@", q(uv)).replace("@WHEELS@", q(wheels))
    lines = [head.replace("@WORKDIR@", q(workdir) if workdir else "''")]
    if needs.apt_packages:
        lines.append(f"step apt envlab_apt {' '.join(q(p) for p in needs.apt_packages)}")
    if needs.uses_uv or needs.installs:
        lines.append("step uv-init envlab_uv_init " + " ".join(q(p) for p in needs.uv_pythons))
        for n, inst in enumerate(needs.installs, 1):
            lines += _warm_install(inst, n)
        lines.append("step uv-sync envlab_uv sync")
    lines.append(_WARMUP_TAIL)
    return "\n".join(lines) + "\n"


def _warm_install(inst: Install, n: int) -> list[str]:
    q = shlex.quote
    reqs = " ".join(q(r) for r in inst.requirements)
    index = " ".join(q(o) for o in inst.index_options)
    withs = " ".join(f"--with {q(w)}" for w in inst.with_requirements)
    if inst.tool == "uvx":
        if not reqs:
            return []
        tool = re.split(r"[=<>!~\[ ;@]", inst.requirements[0], maxsplit=1)[0]
        return [f"step uvx-{n} envlab_uvx {q(tool)} {index} {withs} --from {reqs}"]
    out: list[str] = []
    if reqs:
        out.append(f"step uv-add-{n} envlab_uv add {index} {reqs}")
    if withs:
        out.append(f"step uv-run-with-{n} envlab_uv run {withs} python -c pass")
    if inst.tool == "pip" and reqs:
        out.append(f"step pip-wheels-{n} envlab_pip_wheels {index} {reqs}")
    return out


_WARMUP_HEAD = r"""#!/bin/sh
# envlab warm-up: fills the caches that the task's test scripts use offline at grading time.
unset UV_OFFLINE PIP_NO_INDEX PIP_FIND_LINKS UV_PYTHON_DOWNLOADS VIRTUAL_ENV
export HOME="${HOME:-/root}" DEBIAN_FRONTEND=noninteractive UV_LINK_MODE=copy UV_NO_PROGRESS=1
envlab_uv_bin=@UV@
envlab_wheels=@WHEELS@
envlab_ok=0; envlab_failed=''
step() {
  envlab_name=$1; shift
  echo "envlab warm-up: $envlab_name: $*"
  if "$@"; then envlab_ok=$((envlab_ok + 1))
  else echo "envlab warm-up: step $envlab_name failed (exit $?), going on" >&2
       envlab_failed="$envlab_failed $envlab_name"; fi
}
envlab_apt() {
  for f in /etc/apt/apt.conf.d/*; do  # docker-clean deletes downloaded .debs after each update
    if [ -f "$f" ] && grep -q 'Post-Invoke' "$f" && grep -q 'var/cache/apt/archives' "$f"; then
      mv "$f" "$f.disabled"
    fi
  done
  printf '%s\n' 'APT::Keep-Downloaded-Packages "true";' \
    'Binary::apt::APT::Keep-Downloaded-Packages "true";' >/etc/apt/apt.conf.d/zz-envlab-keep-debs
  apt-get update && apt-get install -y --download-only \
    -o APT::Keep-Downloaded-Packages=true -o Binary::apt::APT::Keep-Downloaded-Packages=true "$@"
}
envlab_uv() { (cd "$envlab_project" && "$envlab_uv_bin" "$@"); }
envlab_uv_init() {
  [ -x "$envlab_uv_bin" ] || { echo "no uv at $envlab_uv_bin" >&2; return 1; }
  for p in "$@"; do "$envlab_uv_bin" python install "$p" || return 1; done
  if [ $# -gt 0 ]; then envlab_uv init --python "$1"; else envlab_uv init; fi
}
envlab_uvx() {  # runs the tool's --help so that its environment is resolved and cached
  envlab_tool=$1; shift
  (cd "$envlab_project" && "$envlab_uv_bin" tool run "$@" "$envlab_tool" --help >/dev/null)
}
envlab_pip_wheels() {
  if ! python3 -m pip --version >/dev/null 2>&1; then
    echo "the image has no pip (python3 -m pip): skipped" >&2; return 0
  fi
  mkdir -p "$envlab_wheels" &&
    { python3 -m pip wheel -w "$envlab_wheels" "$@" ||
      python3 -m pip download -d "$envlab_wheels" "$@"; }
}
envlab_project=$(mktemp -d) || exit 1
envlab_workdir=@WORKDIR@
# the tests' `uv init`/`uv add` run in the image's working directory: a project there (its
# pyproject.toml, lock, sources) takes part in the resolution, so the warm-up starts from a copy
if [ -n "$envlab_workdir" ] && [ -f "$envlab_workdir/pyproject.toml" ] &&
   [ "$(du -sk "$envlab_workdir" | cut -f1)" -lt 204800 ]; then
  cp -a "$envlab_workdir/." "$envlab_project/" && rm -rf "$envlab_project/.venv"
fi
"""

_WARMUP_TAIL = r"""rm -rf "$envlab_project"
envlab_n_failed=$(echo $envlab_failed | wc -w)
echo "envlab warm-up: $envlab_ok steps ok, $envlab_n_failed failed${envlab_failed:+:$envlab_failed}"
"""
