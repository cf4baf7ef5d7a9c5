"""The files of a train run besides its trajectories: ``train.json`` (what a ``--resume`` must
match), ``run.json`` (so that ``envlab report``/``export`` read it as a run), and the state a
resume starts from (the last checkpoint, with the files cut back to what it saw)."""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envlab import __version__
from envlab.core import ConfigError, EnvSpec, StoreError, TaskSet
from envlab.runs import RUN_FILE, TRAJECTORIES_FILE, RunInfo, write_run_info
from envlab.runs.metrics import METRICS_FILE, truncate
from envlab.train.checkpoint import LoopState, latest_checkpoint, load_checkpoint
from envlab.train.learner import Learner
from envlab.train.metrics import dump_json

if TYPE_CHECKING:
    from envlab.train.loop import TrainConfig

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
            learner.load_state_dict(learner_state)
            if learner.version != state.step:
                raise StoreError(
                    f"{ckpt}: the learner's state is at version {learner.version} but the "
                    f"loop's at step {state.step}; the checkpoint is inconsistent"
                )
            notes.append(f"resumed from {ckpt.name} (step {state.step})")
        else:
            notes.append("no checkpoint yet: started again from step 0")
        _cut_back(run_dir / TRAJECTORIES_FILE, state.trajectories_bytes, ckpt)
        _cut_back(run_dir / METRICS_FILE, state.metrics_bytes, ckpt)
    dump_json(train_file, identity | {"steps": cfg.steps, "concurrency": cfg.concurrency})
    _write_run_info(run_dir, spec, tasks, learner, cfg, command)
    return state, notes


def _cut_back(path: Path, size: int, ckpt: Path | None) -> None:
    """Cut ``path`` to what the checkpoint saw; a file shorter than that lost lines the
    checkpoint counts on (cut by hand, or restored from an older copy): refuse it."""
    have = path.stat().st_size if path.exists() else 0
    if have < size:
        raise StoreError(
            f"{path} has {have} bytes but the checkpoint {ckpt} saw {size}: lines it counts on "
            "are gone. Restore the file, or start a new run with another --out."
        )
    truncate(path, size)


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
