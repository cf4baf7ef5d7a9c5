"""The files envlab mounts read-only at ``/opt/envlab`` in the verifier sandbox.

``bin/``: ``python3``, ``python`` and ``pytest`` first on PATH (safe-path python; pytest with a
session guard); ``lib/``: ``verifier_run.py`` (the sandbox's first process, see its docstring),
``run_pytest.py`` and ``bash_env.sh``. Written once per content into the state directory.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

from envlab.sandbox.layout import host_layout
from envlab.sandbox.workspace import state_dir

MOUNT = "/opt/envlab"
BIN = f"{MOUNT}/bin"
LIB = f"{MOUNT}/lib"
END = "ENVLAB-VERIFIER-END "
"""Starts the last line of the reporting process's stdout, ``verifier_run.py`` (host mode) or
``image_report.sh`` (images), then a JSON object (kept equal to their ``END``)."""
EVENTS = "/logs/.envlab-events"
"""envlab's events channel in the verifier: a FIFO the host reads while the tests run, bind-
mounted (it cannot be replaced or erased); the pytest guard and the bash hook write on it."""
LIB_FILES = ("verifier_run.py", "run_pytest.py", "envlab_pytest_guard.py", "bash_env.sh")

# python3 that never puts the working directory (/app) on sys.path for -c, -m or stdin (also
# PYTHONSAFEPATH=1 for every python whatever its name); ``-m pytest`` runs the guarded pytest
_PYTHON = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in
    -W|-X) skip=1; continue ;;
  esac
  if [ -n "$skip" ]; then skip=; continue; fi
  if [ -n "$module" ]; then
    [ "$arg" = pytest ] && pytest=1
    break
  fi
  case "$arg" in
    -mpytest) pytest=1; break ;;
    -m) module=1; continue ;;
    --*|-*) continue ;;
    *) break ;;
  esac
done
if [ -n "$pytest" ]; then
  while [ "$#" -gt 0 ]; do
    case "$1" in -mpytest) shift; break ;; -m) shift 2; break ;; *) shift ;; esac
  done
  exec {python} -P {lib}/run_pytest.py "$@"
fi
exec {python} -P "$@"
"""
_PYTEST = """#!/bin/sh
exec {python} -P {lib}/run_pytest.py "$@"
"""


def kit_dir() -> Path:
    """The kit on the host (made once per content), to mount at ``MOUNT``."""
    python = host_layout(state_dir()).python_bin
    sources = {f"lib/{n}": ((files(__package__) / n).read_text(), 0o644) for n in LIB_FILES}
    scripts = {
        f"bin/{name}": (text.format(python=python, lib=LIB), 0o755)
        for name, text in (("python3", _PYTHON), ("python", _PYTHON), ("pytest", _PYTEST))
    }
    return _written("verifier-kit", {**sources, **scripts}, salt=python)


IMAGE_KIT = "/opt/envlab/grade"
"""Where the image verifier's kit is mounted (read-only): ``report.sh`` (its first process),
``bash_env.sh`` and ``py/envlab_pytest_guard.py`` (``PYTEST_PLUGINS``)."""
IMAGE_REPORT = "/opt/envlab/report"
"""The image verifier's writable report directory: ``events`` (pytest sessions, missing tools)."""


def image_kit_dir() -> Path:
    """The image verifier's kit on the host (made once per content), for ``IMAGE_KIT``."""
    pkg = files(__package__)
    return _written(
        "image-grade-kit",
        {
            "report.sh": ((pkg / "image_report.sh").read_text(), 0o644),
            "bash_env.sh": ((pkg / "bash_env.sh").read_text(), 0o644),
            "py/envlab_pytest_guard.py": ((pkg / "envlab_pytest_guard.py").read_text(), 0o644),
        },
    )


def image_kit_env(base: dict[str, str]) -> dict[str, str]:
    """What the image verifier's environment adds to ``base``: the bash hook, the pytest guard
    (kept beside the task's own ``PYTHONPATH``/``PYTEST_PLUGINS``), safe-path pythons that write
    no bytecode."""
    path = ":".join(p for p in (f"{IMAGE_KIT}/py", base.get("PYTHONPATH", "")) if p)
    plugins = ",".join(p for p in ("envlab_pytest_guard", base.get("PYTEST_PLUGINS", "")) if p)
    return {
        "BASH_ENV": f"{IMAGE_KIT}/bash_env.sh",
        "PYTHONPATH": path,
        "PYTEST_PLUGINS": plugins,
        "PYTHONSAFEPATH": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
    }


def _written(prefix: str, contents: dict[str, tuple[str, int]], salt: str = "") -> Path:
    """A directory under the state directory holding ``contents`` (relative path: text, mode),
    written once per content and renamed into place."""
    h = hashlib.sha256(salt.encode())
    for name, (text, mode) in sorted(contents.items()):
        h.update(f"{name}\0{mode}\0{text}\0".encode())
    d = state_dir() / f"{prefix}-{h.hexdigest()[:12]}"
    if d.is_dir():
        return d
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=state_dir()))
    for name, (text, mode) in contents.items():
        target = tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    for p in [tmp, *tmp.rglob("*")]:
        if p.is_dir():
            p.chmod(0o755)
    try:
        tmp.rename(d)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return d
