"""Checkpoints of a train run: the learner's state and the loop's, written atomically.

``checkpoints/step-000040.pt`` holds ``{"learner": learner.state_dict(), "loop": LoopState}``;
it is written to a temporary file and renamed, so a kill mid-write leaves the previous one. It
is read with ``torch.load(weights_only=True)``: a checkpoint can hold tensors and plain values,
never code, so opening one cannot run anything.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envlab.core import ConfigError, StoreError

CHECKPOINTS_DIR = "checkpoints"
_NAME = re.compile(r"^step-(\d{6,})\.pt$")
KEEP = 2


@dataclass(slots=True)
class LoopState:
    """Where the loop stood when the checkpoint was taken."""

    step: int = 0
    next_group: int = 0
    """Groups ``0 .. next_group-1`` were started."""
    pending: list[int] = field(default_factory=list)
    """Groups started but neither learned from nor dropped: run again on resume."""
    episodes: int = 0
    dropped_stale: int = 0
    dropped_groups: int = 0
    excluded_samples: int = 0
    elapsed_s: float = 0.0
    trajectories_bytes: int = 0
    """Size of ``trajectories.jsonl`` at the checkpoint: lines after it are set aside on resume."""
    metrics_bytes: int = 0
    trajectories_tail: str = ""
    """``tail_digest`` of ``trajectories.jsonl`` at ``trajectories_bytes`` ("" before it was
    recorded): a resume checks the file still ends a line there with that same line."""
    metrics_tail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoopState:
        """The state ``to_dict`` wrote; ``ValueError`` for anything else (a key missing or
        unknown, a count that is not a non-negative integer)."""
        state = cls(**data)
        for name, value in state.to_dict().items():
            if name == "elapsed_s":
                ok = isinstance(value, int | float) and value >= 0
            elif name == "pending":
                ok = isinstance(value, list) and all(_count(v) for v in value)
            elif name.endswith("_tail"):
                ok = isinstance(value, str) and len(value) in (0, 64)
            else:
                ok = _count(value)
            if not ok:
                raise ValueError(f"the loop's {name} is {value!r}")
        return state


def tail_digest(path: Path, size: int) -> str:
    """SHA-256 of the line of ``path`` that ends at byte ``size`` (with its newline); "" when
    ``size`` is 0. ``ValueError`` when no line ends there (the file is shorter, or ``size``
    falls inside a line)."""
    if size == 0:
        return ""
    with path.open("rb") as f:
        start = size
        while start > 0:  # back to the newline before the last line (lines are short)
            step = min(start, 1 << 16)
            f.seek(start - step)
            chunk = f.read(step)
            cut = chunk.rfind(b"\n", 0, len(chunk) - 1 if start == size else len(chunk))
            if cut >= 0:
                start = start - step + cut + 1
                break
            start -= step
        f.seek(start)
        line = f.read(size - start)
    if len(line) != size - start or not line.endswith(b"\n"):
        raise ValueError(f"no line of {path.name} ends at byte {size}")
    return hashlib.sha256(line).hexdigest()


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_PLAIN = (int, float, bool, str, type(None))


def check_plain(value: Any, where: str = "state") -> None:
    """``ConfigError`` unless ``value`` is made of what ``torch.load(weights_only=True)``
    reads back: tensors, numbers, strings, ``None``, lists, tuples and dicts of them."""
    import torch

    if isinstance(value, (*_PLAIN, torch.Tensor)):
        return
    if isinstance(value, list | tuple):
        for i, v in enumerate(value):
            check_plain(v, f"{where}[{i}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, _PLAIN):
                raise ConfigError(f"the learner's {where} has a key of type {type(k).__name__}")
            check_plain(v, f"{where}[{k!r}]")
        return
    raise ConfigError(
        f"the learner's {where} is a {type(value).__name__}: a checkpoint holds tensors, numbers, "
        "strings, lists and dicts only (torch.load(weights_only=True) could not read it back "
        "on --resume); make state_dict() return plain values"
    )


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS_DIR / f"step-{step:06d}.pt"


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint of the highest step in ``run_dir``, or ``None``."""
    folder = run_dir / CHECKPOINTS_DIR
    if not folder.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := _NAME.match(p.name))]
    return max(found)[1] if found else None


def save_checkpoint(run_dir: Path, learner_state: dict[str, Any], loop: LoopState) -> Path:
    """Write the checkpoint of ``loop.step`` atomically; keep the last ``KEEP``."""
    import torch

    check_plain(learner_state)
    path = checkpoint_path(run_dir, loop.step)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        torch.save({"learner": learner_state, "loop": loop.to_dict()}, tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        raise StoreError(f"cannot write the checkpoint {path}: {e.strerror or e}") from e
    for old in sorted(path.parent.glob("step-*.pt"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def load_checkpoint(path: Path) -> tuple[dict[str, Any], LoopState]:
    """The learner's state and the loop's, from ``path``; ``StoreError`` when unreadable."""
    import torch

    try:
        data = torch.load(path, weights_only=True)
        return data["learner"], LoopState.from_dict(data["loop"])
    except (
        OSError, RuntimeError, KeyError, TypeError, ValueError, EOFError, pickle.UnpicklingError
    ) as e:  # fmt: skip
        raise StoreError(
            f"cannot read the checkpoint {path} ({type(e).__name__}: {e}). Delete it to resume "
            "from the one before, or start a new run with another --out."
        ) from e
