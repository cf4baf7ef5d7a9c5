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
"""Starts the last line of ``verifier_run.py``'s stdout (kept equal to its ``END``)."""
LIB_FILES = ("verifier_run.py", "run_pytest.py", "bash_env.sh")

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
    sources = {name: (files(__package__) / name).read_text() for name in LIB_FILES}
    scripts = {
        name: text.format(python=python, lib=LIB)
        for name, text in (("python3", _PYTHON), ("python", _PYTHON), ("pytest", _PYTEST))
    }
    h = hashlib.sha256(python.encode())
    for name, text in sorted({**sources, **scripts}.items()):
        h.update(f"{name}\0{text}\0".encode())
    d = state_dir() / f"verifier-kit-{h.hexdigest()[:12]}"
    if d.is_dir():
        return d
    tmp = Path(tempfile.mkdtemp(prefix="verifier-kit-", dir=state_dir()))
    (tmp / "bin").mkdir()
    (tmp / "lib").mkdir()
    for name, text in scripts.items():
        (tmp / "bin" / name).write_text(text)
        (tmp / "bin" / name).chmod(0o755)
    for name, text in sources.items():
        (tmp / "lib" / name).write_text(text)
        (tmp / "lib" / name).chmod(0o644)
    for p in (tmp, tmp / "bin", tmp / "lib"):
        p.chmod(0o755)
    try:
        tmp.rename(d)
    except OSError:  # another process made it first
        shutil.rmtree(tmp, ignore_errors=True)
    return d
