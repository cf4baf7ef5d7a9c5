"""The files of a train run besides its trajectories: ``train.json`` (what a ``--resume`` must
match), ``run.json`` (so that ``envlab report``/``export`` read it as a run), and the state a
resume starts from (the last checkpoint, with the files cut back to what it saw)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlab import __version__
from envlab.core import ConfigError, EnvSpec, StoreError, TaskSet
from envlab.runs import RUN_FILE, TRAJECTORIES_FILE, RunInfo, write_run_info
from envlab.runs.metrics import METRICS_FILE, truncate
from envlab.train.checkpoint import LoopState, latest_checkpoint, load_checkpoint, tail_digest
from envlab.train.learner import Learner
from envlab.train.metrics import dump_json

if TYPE_CHECKING:
    from envlab.train.config import TrainConfig

TRAIN_FILE = "train.json"


def _identity(spec: EnvSpec, tasks: TaskSet, learner: Learner, cfg: TrainConfig) -> dict[str, Any]:
    return {
        "env_id": spec.name,
        "env_hash": spec.content_hash(),
        "task_set_hash": tasks.content_hash(),
        "learner": f"{type(learner).__module__}.{type(learner).__qualname__}",
        "config": cfg.identity(),
    }


def prepare_run(
    run_dir: Path,
    spec: EnvSpec,
    tasks: TaskSet,
    learner: Learner,
    cfg: TrainConfig,
    *,
    resume: bool,
    command: list[str],
) -> tuple[LoopState, list[str]]:
    """Check ``run_dir`` may take this run, write its identity, and return where to start:
    a fresh state, or the last checkpoint's (loaded into ``learner``) for a resume."""
    train_file, notes = run_dir / TRAIN_FILE, []
    identity = _identity(spec, tasks, learner, cfg)
    started = train_file.exists() or (run_dir / TRAJECTORIES_FILE).exists()
    if started and not resume:
        raise ConfigError(
            f"{run_dir} already holds a run. Pass --resume to continue it, or choose another --out."
        )
    state = LoopState()
    if started:
        old = _read_identity(train_file)
        diff = sorted(k for k, v in identity.items() if old.get(k) != v)
        if diff:
            raise ConfigError(
                f"cannot resume {run_dir}: this command differs from the recorded run in "
                f"{', '.join(diff)}. Resume with the same environment, tasks, learner and "
                "settings (only --steps may change), or use a new --out."
            )
        ckpt = latest_checkpoint(run_dir)
        if ckpt is not None:
            learner_state, state = load_checkpoint(ckpt)
            _load_learner(learner, learner_state, ckpt)
            if learner.version != state.step:
                raise StoreError(
                    f"{ckpt}: the learner's state is at version {learner.version} but the "
                    f"loop's at step {state.step}; the checkpoint is inconsistent"
                )
            notes.append(f"resumed from {ckpt.name} (step {state.step})")
        else:
            notes.append("no checkpoint yet: started again from step 0")
        files = ((run_dir / TRAJECTORIES_FILE, state.trajectories_bytes, state.trajectories_tail),
                 (run_dir / METRICS_FILE, state.metrics_bytes, state.metrics_tail))  # fmt: skip
        for path, size, tail in files:  # every file checked before any is cut
            _check_cut(path, size, tail, ckpt)
        for path, size, _ in files:
            if (aside := set_aside(path, size, state.step)) is not None:
                notes.append(f"{aside.name}: what {path.name} recorded after step {state.step}")
    dump_json(train_file, identity | {"steps": cfg.steps, "concurrency": cfg.concurrency})
    _write_run_info(run_dir, spec, tasks, learner, cfg, command)
    return state, notes


def _load_learner(learner: Learner, state: dict[str, Any], ckpt: Path) -> None:
    """The learner's state from ``ckpt``; a state it cannot take (a tensor of another shape, a
    key missing) is a clear ``StoreError`` naming the checkpoint, never a raw traceback."""
    try:
        learner.load_state_dict(state)
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError, IndexError) as e:
        raise StoreError(
            f"the learner cannot take the state in the checkpoint {ckpt} ({type(e).__name__}: "
            f"{str(e)[:500]}): it was written by another learner or model, or changed. Delete "
            "it to resume from the one before, or start a new run with another --out."
        ) from e


def _check_cut(path: Path, size: int, tail: str, ckpt: Path | None) -> None:
    """The checkpoint's view of ``path`` must still hold: at least ``size`` bytes, a line
    ending at ``size``, and (when recorded) that line the one the checkpoint saw. Else the
    file or the checkpoint was changed: refuse, before anything is cut."""
    have = path.stat().st_size if path.exists() else 0
    if have < size:
        raise StoreError(
            f"{path} has {have} bytes but the checkpoint {ckpt} saw {size}: lines it counts on "
            "are gone. Restore the file, or start a new run with another --out."
        )
    try:
        found: str | None = tail_digest(path, size)
    except ValueError:
        found = None  # ``size`` falls inside a line
    if found is None or (tail and found != tail):
        raise StoreError(
            f"the checkpoint {ckpt} does not match {path}: the line it saw last, at byte {size}, "
            "is not there. The checkpoint or the file was changed; nothing was cut. Restore "
            "them, delete the checkpoint to resume from the one before, or use another --out."
        )


def set_aside(path: Path, size: int, step: int) -> Path | None:
    """Move what ``path`` holds past ``size`` (recorded after the checkpoint of ``step``: the
    steps a resume redoes) to ``PATH.after-step-N[.k]``, then cut ``path`` there. Nothing
    recorded is lost; ``None`` when there was nothing past ``size``."""
    if not path.exists() or path.stat().st_size <= size:
        return None
    aside = path.with_name(f"{path.name}.after-step-{step}")
    k = 1
    while aside.exists():
        aside, k = path.with_name(f"{path.name}.after-step-{step}.{k}"), k + 1
    with path.open("rb") as src, aside.open("xb") as dst:
        src.seek(size)
        while chunk := src.read(1 << 20):
            dst.write(chunk)
        dst.flush()
        os.fsync(dst.fileno())
    truncate(path, size)
    return aside


def _read_identity(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(
            f"{path.parent} holds trajectories but no {TRAIN_FILE}: it is not a train run. "
            "Choose another --out."
        ) from None
    except (OSError, ValueError) as e:
        raise StoreError(f"cannot read {path}: {e}") from e
    if not isinstance(data, dict):
        raise StoreError(f"{path} is corrupt: not a JSON object")
    return data


def _write_run_info(
    run_dir: Path,
    spec: EnvSpec,
    tasks: TaskSet,
    learner: Learner,
    cfg: TrainConfig,
    command: list[str],
) -> None:
    created = time.time()
    if (run_dir / RUN_FILE).exists():
        with contextlib.suppress(OSError, ValueError, KeyError):  # then a fresh timestamp
            created = json.loads((run_dir / RUN_FILE).read_text())["created_at"]
    info = RunInfo(
        command=command,
        envlab_version=__version__,
        env_id=spec.name,
        env_hash=spec.content_hash(),
        env_config=spec.config.model_dump(mode="json"),
        agent=learner.policy().spec,
        seed=cfg.seed,
        samples=cfg.group_size,
        n_tasks=len(tasks),
        task_set_hash=tasks.content_hash(),
        task_ids=[t.id for t in tasks],
        concurrency=cfg.concurrency,
        episode_config={"train": cfg.model_dump(mode="json")},
        created_at=created,
    )
    write_run_info(run_dir, info)
