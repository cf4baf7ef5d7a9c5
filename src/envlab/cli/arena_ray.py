"""``envlab arena --catalog SOURCES --backend ray``: each environment vetted as a Ray task.

The driver finds the catalogue and keeps ``arena.json``, as with the local backend; what moves
is the vetting. Each environment is one Ray task (:func:`vet_on_node`, ``num_cpus`` = vet's
``--concurrency``, spread over the nodes) that runs the same ``envlab vet NAME ... --json``
process the local backend runs, on its node (its episodes run there too, ``--backend local``
inside it), in a fresh scratch directory, killed with its process group after
``--env-timeout``. The task returns that directory as a tar (``vet.json``,
``trajectories.jsonl`` and its blobs, probe files; not ``snapshots/``, the copies of final
workspaces vet reads while it runs, which are large and only valid there); the driver unpacks
it into the environment's directory of the arena. Nodes share nothing with the driver but
the installed code.

The vet process is started through a tiny exec wrapper that sets ``PR_SET_PDEATHSIG``: a Ray
worker that dies (SIGKILL, a lost node) takes its vet process with it, and no orphan goes on
vetting. A lost worker (a ``RayError`` that is not a ``RayTaskError``) is the machinery's
failure: the environment is submitted again, fresh, up to ``LOST_BUDGET`` times, each loss
named in its row's ``workers_lost``; past the budget the row is ``vet_failed`` saying so (and
``--resume`` tries it again). Nothing of a lost try is kept: its episodes ran in a scratch
directory that never came back, so each episode is written once, by the try that finished.
A ``RayTaskError`` carries the vetting's own outcome, as locally: ``VetTimedOut`` (a
``timed_out`` row) or the vet process's failure (``vet_failed``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from envlab.adapters.catalog import Found
from envlab.cli.arena_catalog import vet_command, vet_exited, vet_timed_out
from envlab.core import ConfigError
from envlab.vet.model import EnvVet

LOST_BUDGET = 2
"""Fresh tries of one environment after its Ray worker died, before its row says so."""
SCRATCH_PREFIX = "envlab-arena-"
_LEFT_BEHIND = ("snapshots", "lock")
"""What a node's vet directory keeps to itself: workspace copies (big, only valid there) and
the store's lock."""
_STDERR_TAIL = 64_000
_EXEC = (
    "import ctypes, os, signal, sys\n"
    "prctl = getattr(ctypes.CDLL(None), 'prctl', None)\n"  # Linux; elsewhere no death signal
    "if prctl is not None:\n"
    "    prctl(1, signal.SIGKILL, 0, 0, 0)\n"  # PR_SET_PDEATHSIG: die with the Ray worker
    "if os.getppid() != int(sys.argv[1]):\n"  # the worker died before prctl took effect
    "    os._exit(137)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


class WorkersLost(RuntimeError):
    """Every try of one environment's vet task lost its Ray worker."""


class RayVet:
    """A ``vet`` for :func:`~envlab.cli.arena_catalog.run_catalog` whose vettings run as Ray
    tasks of ``cpus`` CPUs each, on the cluster this process is connected to (the caller
    connects once for the whole arena: ``rollout.driver.backend_session``)."""

    def __init__(
        self, vet_args: list[str], timeout_s: float, cpus: int, lost_budget: int = LOST_BUDGET
    ) -> None:
        from envlab.rollout.ray_backend import import_ray

        self.ray = import_ray()
        if not self.ray.is_initialized():
            raise ConfigError("RayVet needs a Ray connection: connect (backend_session) first")
        _check_fits(self.ray, cpus)
        self.vet_args, self.timeout_s, self.lost_budget = vet_args, timeout_s, lost_budget
        self._task = self.ray.remote(vet_on_node).options(
            num_cpus=cpus, max_retries=0, scheduling_strategy="SPREAD"
        )
        self.workers_lost: dict[str, list[str]] = {}
        """Environment name -> the Ray workers lost under its vetting (``run_catalog`` reads
        it into the rows)."""

    async def __call__(self, found: Found, where: Path) -> EnvVet:
        from envlab.vet.runner import VET_FILE

        exc = self.ray.exceptions
        lost = self.workers_lost.setdefault(found.name, [])
        while True:
            ref = self._task.remote(found.name, self.vet_args, self.timeout_s)
            try:
                blob: bytes = await _result(self.ray, ref)
                break
            except exc.RayTaskError as e:  # the vetting's own outcome, raised on the node
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else RuntimeError(_line(e))) from None
            except exc.RayError as e:  # the worker or its node died under it: try it afresh
                lost.append(f"{type(e).__name__}: {_line(e)}")
                if len(lost) > self.lost_budget:
                    raise WorkersLost(
                        f"the Ray worker vetting it died on each of its {len(lost)} tries (last: "
                        f"{lost[-1]}); the machinery failed, not the environment: --resume "
                        "tries it again, --backend local shows what kills it"
                    ) from None
        await asyncio.to_thread(_unpack, blob, where)
        return EnvVet.model_validate_json((where / VET_FILE).read_bytes())


def _check_fits(ray: Any, cpus: int) -> None:
    """A task no node can hold would wait forever: say so before the first one."""
    sizes = [n.get("Resources", {}).get("CPU", 0) for n in ray.nodes() if n.get("Alive")]
    if sizes and max(sizes) < cpus:
        raise ConfigError(
            f"--concurrency {cpus} asks each environment's Ray task for {cpus} CPUs, but the "
            f"largest node of the cluster has {max(sizes):g}: lower --concurrency, or add a "
            "larger node"
        )


async def _result(ray: Any, ref: Any) -> bytes:
    """``ref``'s value; a cancelled wait (the arena stopped) kills the task's worker, and so
    its vet process."""
    try:
        return await asyncio.wrap_future(ref.future())
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            ray.cancel(ref, force=True)
        raise


def _unpack(blob: bytes, where: Path) -> None:
    """The node's vet directory, as the local backend would have left it in ``where``."""
    shutil.rmtree(where, ignore_errors=True)  # a failed earlier try's leftovers
    where.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        tar.extractall(where, filter="data")


def vet_on_node(name: str, vet_args: list[str], timeout_s: float) -> bytes:
    """The Ray task: ``envlab vet NAME`` in a scratch directory of this node, its process
    killed with its group past ``timeout_s`` (``VetTimedOut``) or with this worker; returns
    the vet directory as a gzipped tar, or raises the vet process's failure."""
    scratch = _scratch()
    out = scratch / "vet"
    argv = [sys.executable, "-c", _EXEC, str(os.getpid()), *vet_command(name, vet_args, out)]
    try:
        with open(scratch / "stderr", "wb") as err:
            child = subprocess.Popen(argv, cwd=scratch, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err,
                                     start_new_session=True)  # fmt: skip
            try:
                code = child.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise vet_timed_out(timeout_s) from None
            finally:  # timed out, or the task cancelled: the group goes, as locally
                _kill_group(child)
        if code != 0:
            raise vet_exited(128 - code if code < 0 else code, _tail(scratch / "stderr"))
        return _packed(out)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _kill_group(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _packed(out: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for path in sorted(out.iterdir()):
            if path.name not in _LEFT_BEHIND:
                tar.add(path, arcname=path.name)
    return buf.getvalue()


def _tail(path: Path) -> bytes:
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - _STDERR_TAIL))
        return f.read()


def _scratch() -> Path:
    """A fresh directory for one try, named by host and worker pid; first, the directories of
    this host's workers that died (killed before they could remove theirs) are removed."""
    root, host = Path(tempfile.gettempdir()), socket.gethostname()
    for old in root.glob(f"{SCRATCH_PREFIX}*"):
        pid, _, rest = old.name[len(SCRATCH_PREFIX) :].partition("-")
        if pid.isdigit() and rest.startswith(f"{host}-") and _dead(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-{host}-"))


def _dead(pid: int) -> bool:
    """No such process, or one that has exited and waits to be reaped (without ``/proc``:
    not known, so kept)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return Path("/proc/self").exists()
    return state in ("Z", "X")


def _line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [""])[0][:300]
