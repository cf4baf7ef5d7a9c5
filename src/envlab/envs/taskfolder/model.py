"""A task folder on disk (the Harbor format): ``task.toml`` as pydantic models, and the folder.

my-task/
  instruction.md        the prompt
  task.toml             timeouts, resources, network, env, metadata
  environment/          Dockerfile (a subset is honoured) or plain files (+ setup.sh)
  solution/solve.sh     the oracle; never visible to agents
  tests/test.sh         the verifier; writes /logs/verifier/reward.txt or reward.json
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from envlab.core.errors import ConfigError

NetworkMode = Literal["none", "host", "bridge", "public"]


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_keys(self) -> list[str]:
        return sorted(self.model_extra or {})


class AgentSection(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    user: str | None = None


class VerifierSection(_Section):
    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | None = None


class EnvironmentSection(_Section):
    build_timeout_sec: float = Field(600.0, gt=0)
    network_mode: NetworkMode = "none"
    allow_internet: bool | None = None
    """Harbor's older spelling: ``true`` means ``network_mode = "host"``."""
    env: dict[str, str] = Field(default_factory=dict)
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, gt=0)
    memory: str | None = None
    """Older spelling, e.g. ``"2G"`` or ``"512M"``."""
    storage_mb: int | None = Field(None, gt=0)
    docker_image: str | None = None

    @model_validator(mode="after")
    def _legacy(self) -> EnvironmentSection:
        if self.allow_internet:
            self.network_mode = "host"
        if self.memory_mb is None and self.memory:
            self.memory_mb = _parse_memory(self.memory)
        return self

    @property
    def network(self) -> bool:
        return self.network_mode != "none"


def _parse_memory(text: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        if t and t[-1] in units:
            return max(1, int(float(t[:-1]) * units[t[-1]]))
        return max(1, int(float(t) / (1 << 20)))
    except ValueError:
        raise ValueError(f"memory {text!r} is not a size like '2G' or '512M'") from None


class TaskConfig(BaseModel):
    """``task.toml``. Unknown keys are kept and listed by ``envlab task check``, as in Harbor."""

    model_config = ConfigDict(extra="allow")

    version: str | None = None
    schema_version: str | None = None
    task: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)  # type: ignore[arg-type]
    verifier: VerifierSection = Field(default_factory=VerifierSection)  # type: ignore[arg-type]
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)  # type: ignore[arg-type]
    split: str = "test"

    def unknown_keys(self) -> list[str]:
        keys = [k for k in (self.model_extra or {}) if k not in ("solution", "source", "steps")]
        for name in ("agent", "verifier", "environment"):
            keys += [f"{name}.{k}" for k in getattr(self, name).unknown_keys()]
        return sorted(keys)


@dataclass(frozen=True, slots=True)
class TaskFolder:
    """One task folder, parsed. Paths are absolute."""

    path: Path
    name: str
    instruction: str
    config: TaskConfig

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def dockerfile(self) -> Path | None:
        p = self.environment_dir / "Dockerfile"
        return p if p.is_file() else None

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def solution(self) -> Path | None:
        p = self.solution_dir / "solve.sh"
        return p if p.is_file() else None

    def content_hash(self, parts: tuple[str, ...] = ("",)) -> str:
        """Hash of the files under ``parts`` (relative folders; ``""`` is the whole folder).

        Remembered per (path, size, mtime) of every file: files are read again only when one
        of them changed."""
        files = [f for part in parts for f in _files(self.path / part if part else self.path)]
        stamp = tuple((str(f), *_stat_key(f)) for f in files)
        known = _hashes.get(stamp)
        if known is not None:
            return known
        h = hashlib.sha256()
        for f in files:
            rel = f.relative_to(self.path).as_posix()
            h.update(f"{rel}\0{f.lstat().st_mode:o}\0".encode())
            h.update(os.readlink(f).encode() if f.is_symlink() else f.read_bytes())
        _hashes[stamp] = digest = h.hexdigest()[:16]
        return digest


_hashes: dict[tuple[tuple[object, ...], ...], str] = {}


def _stat_key(f: Path) -> tuple[int, int, int]:
    st = f.lstat()
    return st.st_size, st.st_mtime_ns, st.st_mode


def _files(root: Path) -> list[Path]:
    if not root.exists():
        return []
    if not root.is_dir():
        return [root]
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache"))
        out += [Path(dirpath) / n for n in sorted(filenames) if not n.endswith(".pyc")]
    return out


def is_task_folder(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "instruction.md").is_file()


def load_task_folder(path: str | Path) -> TaskFolder:
    """Parse a task folder; raise ``ConfigError`` saying what is missing or wrong."""
    p = Path(path).resolve()
    st = [(p / n).stat().st_mtime_ns if (p / n).exists() else 0 for n in _KEY_FILES]
    return _load(p, tuple(st))


_KEY_FILES = ("task.toml", "instruction.md")


@cache
def _load(path: Path, _stamp: tuple[int, ...]) -> TaskFolder:
    if not path.is_dir():
        raise ConfigError(f"task folder {path} does not exist or is not a directory")
    instruction = path / "instruction.md"
    if not instruction.is_file():
        raise ConfigError(f"task folder {path} has no instruction.md (the agent's prompt)")
    if not (path / "tests" / "test.sh").is_file():
        raise ConfigError(
            f"task folder {path} has no tests/test.sh: the verifier that writes "
            "/logs/verifier/reward.txt is required"
        )
    toml_path = path / "task.toml"
    raw: dict[str, Any] = {}
    if toml_path.is_file():
        try:
            raw = tomllib.loads(toml_path.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{toml_path} is not valid TOML: {e}") from None
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()
        )
        raise ConfigError(f"{toml_path}: {problems}") from None
    return TaskFolder(path=path, name=path.name, instruction=instruction.read_text(), config=config)


def find_task_folders(path: str | Path) -> list[TaskFolder]:
    """The task folder at ``path``, or every task folder directly inside it (sorted by name)."""
    p = Path(path).resolve()
    if not p.exists():
        raise ConfigError(f"{p} does not exist: give a task folder or a directory of them")
    if is_task_folder(p):
        return [load_task_folder(p)]
    found = [load_task_folder(c) for c in sorted(p.iterdir()) if c.is_dir() and is_task_folder(c)]
    if not found:
        raise ConfigError(
            f"{p} is neither a task folder (instruction.md, task.toml, tests/test.sh) "
            "nor a directory of task folders"
        )
    return found
