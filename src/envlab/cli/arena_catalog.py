"""``envlab arena --catalog rg,gym,ta,...``: vet every environment a catalogue finds, in
parallel, resumably, into one ``arena.json`` and ``arena.html``.

Each environment gets a bounded number of tasks (``--tasks``, the first of its default split:
what vet can see on them is what it reports; a flaw only on later tasks is missed, and a
statistical check has less power on few tasks). Environments run ``--jobs`` at a time; each
finished one is written at once, so a killed arena loses only the ones in flight, and
``--resume`` vets only what is missing. An environment that did not load, or whose vetting
failed, is a row with its reason, never left out.

Each environment is vetted in its own process (:func:`process_vet`), killed with its whole
process group after ``--env-timeout`` seconds: third-party code runs there (a puzzle generator
searching for minutes, a loop that never ends, a crash in a C extension), and one environment
must not hold the arena or take it down. Such an environment is a ``timed_out`` row. With
``--backend ray`` the same process runs on a Ray node instead (``cli/arena_ray.py``).

Environments start longest first (:func:`by_cost`), so that the slowest one does not start
last and hold the arena alone at its end: the cost is what an earlier arena measured
(``--costs``, :func:`costs_of`), else the load time the catalogue measured, scaled to vet time.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from envlab.adapters.catalog import Found, find
from envlab.core import ConfigError
from envlab.vet.model import EnvVet

ARENA_FILE = "arena.json"
_STDERR_LIMIT = 64_000


class VetTimedOut(Exception):
    """The vetting of one environment ran past the arena's per-environment budget."""


class ArenaEntry(BaseModel):
    """One environment of the catalogue, as the arena saw it."""

    name: str
    source: str
    status: Literal["vetted", "not_loaded", "vet_failed", "timed_out"]
    reason: str = ""
    env_hash: str | None = None
    verdict_counts: dict[str, int] = Field(default_factory=dict)
    quality_score: float | None = None
    clean: bool | None = None
    tasks: int = 0
    episodes: int = 0
    infra_errors: int = 0
    elapsed_s: float = 0.0
    cost_per_episode_s: float | None = None
    findings: list[str] = Field(default_factory=list)
    """One line per task whose verdict is not ok: the task, its verdict and the failing check."""
    vet_dir: str | None = None
    workers_lost: list[str] = Field(default_factory=list)
    """``--backend ray``: the Ray workers that died under this environment's vetting (each
    one a fresh try elsewhere; the machinery's failure, not the environment's)."""


class Arena(BaseModel):
    """``arena.json`` of a catalogue run."""

    sources: list[str]
    settings: dict[str, object]
    started_at: float
    wall_s: float = 0.0
    entries: list[ArenaEntry] = Field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out = {"found": len(self.entries)}
        for e in self.entries:
            out[e.status] = out.get(e.status, 0) + 1
        return out


def entry_of(found: Found, rep: EnvVet, vet_dir: Path) -> ArenaEntry:
    findings = []
    for t in rep.tasks:
        if t.verdict != "ok":
            failing = [f"{c.name}: {c.summary}" for c in t.checks if c.status == "fail"]
            findings.append(f"{t.task_id}: {t.verdict} ({'; '.join(failing)[:300]})")
    return ArenaEntry(
        name=found.name,
        source=found.source,
        status="vetted",
        env_hash=rep.env_hash,
        verdict_counts=dict(rep.verdict_counts),
        quality_score=rep.quality_score,
        clean=rep.clean,
        tasks=len(rep.tasks),
        episodes=rep.episodes,
        infra_errors=rep.infra_errors,
        elapsed_s=round(rep.elapsed_s, 2),
        cost_per_episode_s=round(rep.elapsed_s / rep.episodes, 4) if rep.episodes else None,
        findings=findings[:50],
        vet_dir=str(vet_dir),
    )


def _load(path: Path, resume: bool, sources: list[str], settings: dict[str, object]) -> Arena:
    if path.exists() and not resume:
        raise ConfigError(
            f"{path} already holds an arena. Pass --resume to finish it, or choose another --out."
        )
    if not path.exists():
        return Arena(sources=sources, settings=settings, started_at=time.time())
    try:
        arena = Arena.model_validate_json(path.read_bytes())
    except ValueError as e:
        raise ConfigError(f"cannot resume {path}: it is not an arena ({e})") from None
    if arena.sources != sources or arena.settings != settings:
        raise ConfigError(
            f"cannot resume {path}: it was run with --catalog {','.join(arena.sources)} and "
            f"{arena.settings}; resume with the same, or use another --out"
        )
    arena.entries = [e for e in arena.entries if e.status != "vet_failed"]  # tried again
    # a timed_out row is kept: the same budget would stop it again (--env-timeout is a setting)
    return arena


def _write(arena: Arena, path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(arena.model_dump_json(indent=2))
    tmp.replace(path)


def costs_of(path: Path) -> dict[str, float]:
    """The measured cost in seconds of each environment of an earlier arena (``--costs``): a
    vetted one's vet time, a timed-out one's budget (at least); rows that measured nothing
    (not loaded, vet failed) are left out."""
    if not path.is_file():
        raise ConfigError(f"--costs {path}: no such file; give the arena.json of an earlier arena")
    try:
        arena = Arena.model_validate_json(path.read_bytes())
    except ValueError as e:
        raise ConfigError(f"--costs {path} is not an arena.json ({e})") from None
    budget = arena.settings.get("env_timeout_s")
    out = {}
    for e in arena.entries:
        if e.status == "vetted" and e.elapsed_s > 0:
            out[e.name] = e.elapsed_s
        elif e.status == "timed_out":
            out[e.name] = max(e.elapsed_s, float(budget) if isinstance(budget, int | float) else 0)
    return out


def by_cost(found: list[Found], costs: Mapping[str, float]) -> list[Found]:
    """``found``, the costliest first (ties by name). An environment without a measured cost
    is estimated from its load time (``Found.seconds``) times the median ratio of vet time to
    load time of the environments that have both (1 when none has)."""
    ratios = [costs[f.name] / f.seconds for f in found if f.name in costs and f.seconds > 0]
    scale = statistics.median(ratios) if ratios else 1.0

    def cost(f: Found) -> float:
        return costs[f.name] if f.name in costs else f.seconds * scale

    return sorted(found, key=lambda f: (-cost(f), f.name))


async def run_catalog(
    sources: list[str],
    out_dir: Path,
    vet: object,
    *,
    settings: dict[str, object],
    jobs: int,
    resume: bool,
    progress: object | None = None,
    costs: Mapping[str, float] | None = None,
) -> Arena:
    """Find, then vet every loaded environment not vetted yet (``vet(found, dir)`` returns its
    ``EnvVet``), ``jobs`` at a time, the costliest first (:func:`by_cost`); ``arena.json`` is
    rewritten after each one. A ``vet`` with a ``workers_lost`` mapping (name -> lost Ray
    workers, ``arena_ray.RayVet``) has it recorded in each row."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / ARENA_FILE
    arena = _load(path, resume, sources, settings)
    t0 = time.perf_counter() - arena.wall_s
    done = {e.name for e in arena.entries}
    found = [f for f in find(sources) if f.name not in done]
    for f in found:
        if not f.loaded:
            arena.entries.append(
                ArenaEntry(name=f.name, source=f.source, status="not_loaded", reason=f.reason)
            )
    _write(arena, path)
    todo = by_cost([f for f in found if f.loaded], costs or {})
    if progress is not None:
        progress.start(len(todo))  # type: ignore[attr-defined]
    gate = asyncio.Semaphore(jobs)

    async def one(f: Found) -> None:
        async with gate:
            where = out_dir / "envs" / f.name.replace(":", "--").replace("/", "_")
            t = time.perf_counter()
            try:
                rep = await vet(f, where)  # type: ignore[operator]
                entry = entry_of(f, rep, where)
            except VetTimedOut as e:
                entry = ArenaEntry(name=f.name, source=f.source, status="timed_out", reason=str(e))
            except Exception as e:  # the vetting itself failed: a row saying why
                why = f"{type(e).__name__}: {str(e).strip()[:400]}"
                entry = ArenaEntry(name=f.name, source=f.source, status="vet_failed", reason=why)
            if entry.status != "vetted":  # what it cost before it stopped (--costs reads it)
                entry.elapsed_s = round(time.perf_counter() - t, 2)
            entry.workers_lost = list(getattr(vet, "workers_lost", {}).get(f.name, []))
            arena.entries.append(entry)
            arena.wall_s = round(time.perf_counter() - t0, 1)
            _write(arena, path)
            if progress is not None:
                progress.done(entry)  # type: ignore[attr-defined]

    await asyncio.gather(*(one(f) for f in todo))
    arena.wall_s = round(time.perf_counter() - t0, 1)
    _write(arena, path)
    return arena


def process_vet(
    vet_args: list[str], timeout_s: float
) -> Callable[[Found, Path], Awaitable[EnvVet]]:
    """A ``vet`` for :func:`run_catalog` that runs ``envlab vet NAME *vet_args --out DIR`` in
    a process of its own and reads the ``vet.json`` it wrote; past ``timeout_s`` the process
    group is killed and :class:`VetTimedOut` raised; a failed run raises with its stderr."""
    from envlab.sandbox.process import run_process
    from envlab.vet.runner import VET_FILE

    async def vet(found: Found, where: Path) -> EnvVet:
        argv = vet_command(found.name, vet_args, where)
        res = await run_process(argv, timeout=timeout_s, output_limit=_STDERR_LIMIT)
        if res.timed_out:
            raise vet_timed_out(timeout_s)
        if res.returncode != 0:
            raise vet_exited(res.returncode, res.stderr)
        return EnvVet.model_validate_json((where / VET_FILE).read_bytes())

    return vet


def vet_command(name: str, vet_args: list[str], where: Path) -> list[str]:
    """``python -m envlab vet NAME *vet_args --out WHERE --json``, with this interpreter."""
    return [sys.executable, "-m", "envlab", "vet", name, *vet_args, "--out", str(where), "--json"]


def vet_timed_out(timeout_s: float) -> VetTimedOut:
    return VetTimedOut(
        f"vetting took longer than --env-timeout {timeout_s:g}s and was stopped; give it more "
        "time (--env-timeout), or fewer tasks (--tasks), or vet it alone"
    )


def vet_exited(returncode: int, stderr: bytes) -> RuntimeError:
    """A vetting process that failed: its status (128 + N for signal N) and stderr's end."""
    tail = stderr.decode("utf-8", "replace").strip().splitlines()[-3:]
    return RuntimeError(f"envlab vet exited with {returncode}: {' | '.join(tail)}")


def reports_of(arena: Arena) -> list[EnvVet]:
    """The ``vet.json`` of every vetted environment (for the ranking and the page)."""
    from envlab.vet.runner import VET_FILE

    out = []
    for e in arena.entries:
        if e.status == "vetted" and e.vet_dir:
            out.append(EnvVet.model_validate_json((Path(e.vet_dir) / VET_FILE).read_bytes()))
    return out


def summary_lines(arena: Arena) -> list[str]:
    c = arena.counts()
    verdicts: dict[str, int] = {}
    for e in arena.entries:
        for k, v in e.verdict_counts.items():
            verdicts[k] = verdicts.get(k, 0) + v
    return [
        f"found {c['found']}, loaded {c['found'] - c.get('not_loaded', 0)}, vetted "
        f"{c.get('vetted', 0)}, vet failed {c.get('vet_failed', 0)}, timed out "
        f"{c.get('timed_out', 0)}, in {arena.wall_s:.0f}s",
        "task verdicts: " + json.dumps(verdicts, sort_keys=True),
    ]
