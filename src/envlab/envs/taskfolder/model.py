"""A task folder on disk (the Harbor format): ``task.toml`` as pydantic models, and the folder.

my-task/
  instruction.md        the prompt
  task.toml             timeouts, resources, network, env, metadata
  environment/          Dockerfile (a subset is honoured) or plain files (+ setup.sh)
  solution/solve.sh     the oracle; never visible to agents
  tests/test.sh         the verifier; writes /logs/verifier/reward.txt or reward.json

``task.toml`` is read as Harbor 0.25 writes it (``harbor/models/task/config.py``): the network
policy per phase (``network_mode`` in ``[environment]``, ``[agent]``, ``[verifier]``), with the
older spellings kept as aliases. Values no host can honour (an infinite timeout, more memory than
the host has) are refused with the file and the field named.
"""

from __future__ import annotations

import hashlib
import math
import os
import shutil
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from envlab.core.errors import ConfigError

NetworkMode = Literal["public", "no-network", "allowlist"]
"""Harbor's network policy. ``public``: the host's network. ``no-network``: a network namespace
of the sandbox's own (only loopback). ``allowlist``: refused (see ``_refuse_allowlist``)."""
Phase = Literal["setup", "agent", "verifier"]

_NETWORK_ALIASES = {"none": "no-network", "host": "public", "bridge": "public"}
"""envlab's earlier spellings (``bridge`` gave the host's network too)."""

MAX_TIMEOUT_SEC = 7 * 24 * 3600.0
MAX_CPUS = 1024
MAX_STORAGE_MB = 1 << 20  # 1 TiB
MAX_INSTRUCTION_BYTES = 1 << 20
MAX_TOML_BYTES = 1 << 20


def _timeout(default: float) -> Any:
    return Field(default, gt=0, le=MAX_TIMEOUT_SEC, allow_inf_nan=False)


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow")

    def unknown_keys(self) -> list[str]:
        return sorted(self.model_extra or {})


class _NetworkPolicy(_Section):
    """``network_mode`` and ``allowed_hosts``, as every Harbor section that has them spells them."""

    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @field_validator("network_mode", mode="before")
    @classmethod
    def _alias(cls, v: object) -> object:
        if isinstance(v, str):
            key = v.strip().lower()
            return _NETWORK_ALIASES.get(key, key)
        return v

    @field_validator("network_mode")
    @classmethod
    def _refuse_allowlist(cls, v: NetworkMode | None) -> NetworkMode | None:
        if v == "allowlist":
            raise ValueError(
                "'allowlist' cannot be honoured: envlab cannot yet restrict a sandbox's network "
                "to a list of hosts safely (a name resolved by the sandbox, a proxy it could "
                "bypass). Use 'no-network' (a network namespace of its own) or 'public' (the "
                "host's network) for this phase"
            )
        return v

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_need_allowlist(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        # when network_mode itself failed (an allowlist, refused) that error says it all
        if v and "network_mode" in info.data and info.data["network_mode"] != "allowlist":
            raise ValueError("allowed_hosts is only valid with network_mode = 'allowlist'")
        return v


class _Baseline(_NetworkPolicy):
    """The network of an environment: envlab's default is ``no-network`` (Harbor's is
    ``public``: a task that needs the network must say so)."""

    network_mode: NetworkMode | None = "no-network"
    allow_internet: bool | None = None
    """Harbor's older spelling, used only where ``network_mode`` is not set: ``true`` is
    ``public``, ``false`` is ``no-network``."""

    @model_validator(mode="after")
    def _legacy_allow_internet(self) -> _Baseline:
        explicit = "network_mode" in self.model_fields_set or self.allowed_hosts is not None
        if self.allow_internet is not None and not explicit:
            self.network_mode = "public" if self.allow_internet else "no-network"
        return self

    @property
    def network(self) -> bool:
        """The host's network for this environment's setup (see ``TaskConfig.network_for``)."""
        return self.network_mode == "public"


class AgentSection(_NetworkPolicy):
    timeout_sec: float = _timeout(600.0)
    user: str | int | None = None


class VerifierEnvironment(_Baseline):
    """``[verifier.environment]``: only its network is read (its baseline for the verifier)."""


class VerifierSection(_NetworkPolicy):
    timeout_sec: float = _timeout(600.0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    environment: VerifierEnvironment | None = None
    environment_mode: Literal["separate", "shared"] = "separate"
    """Harbor's verifier mode: ``separate`` (the default: a fresh sandbox of the pristine image,
    the agent's workspace carried) or ``shared`` (the agent's own sandbox, its processes alive,
    with tamper evidence)."""

    def unknown_keys(self) -> list[str]:
        inner = self.environment.unknown_keys() if self.environment is not None else []
        return sorted([*super().unknown_keys(), *(f"environment.{k}" for k in inner)])


class EnvironmentSection(_Baseline):
    build_timeout_sec: float = _timeout(600.0)
    env: dict[str, str] = Field(default_factory=dict)
    cpus: float | None = Field(None, gt=0, le=MAX_CPUS, allow_inf_nan=False)
    """Recorded, not enforced."""
    memory_mb: int | None = Field(None, gt=0)
    storage_mb: int | None = Field(None, gt=0)
    docker_image: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, data: Any) -> Any:
        """``memory = "2G"`` and ``storage = "10G"`` (older spellings) become ``*_mb``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old not in data:
                continue
            text = data.pop(old)
            if not isinstance(text, str):
                raise ValueError(f"{old} must be a size like '2G' or '512M', got {text!r}")
            mb = _parse_size_mb(text)
            if data.get(new, mb) != mb:
                raise ValueError(f"{old} = {text!r} ({mb} MB) contradicts {new} = {data[new]!r}")
            data[new] = mb
        return data

    @field_validator("memory_mb")
    @classmethod
    def _memory_fits_the_host(cls, v: int | None) -> int | None:
        host = host_memory_mb()
        if v is not None and v > host:
            raise ValueError(
                f"{v} MB is more than this host's physical memory ({host} MB); lower it or run "
                "the task on a larger host"
            )
        return v

    @field_validator("storage_mb")
    @classmethod
    def _storage_fits_the_disk(cls, v: int | None) -> int | None:
        if v is not None and v < 8:
            raise ValueError(f"{v} MB is too small for a workspace; give at least 8")
        if v is not None and v > MAX_STORAGE_MB:
            raise ValueError(
                f"{v} MB is more than 1 TiB ({MAX_STORAGE_MB} MB); no workspace needs it"
            )
        where, size = state_fs_mb()
        if v is not None and v > size:
            raise ValueError(
                f"{v} MB is more than the whole filesystem of envlab's state directory "
                f"({where}: {size} MB); lower it, or set ENVLAB_SANDBOX_DIR to a larger disk"
            )
        return v


def host_memory_mb() -> int:
    """The host's physical memory, in MiB."""
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 20


def state_fs_mb() -> tuple[Path, int]:
    """The filesystem that holds the sandboxes' workspaces (``ENVLAB_SANDBOX_DIR``, found as
    ``envlab.sandbox`` finds it, neither created nor checked here) and its total size in MiB."""
    from envlab.sandbox.workspace import default_state_dir

    p = Path(os.environ.get("ENVLAB_SANDBOX_DIR") or default_state_dir()).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p, shutil.disk_usage(p).total >> 20


def _parse_size_mb(text: str) -> int:
    units = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    try:
        value = float(t[:-1]) * units[t[-1]] if t and t[-1] in units else float(t) / (1 << 20)
    except ValueError:
        raise ValueError(f"{text!r} is not a size like '2G' or '512M'") from None
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite size")
    return max(1, int(value))


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

    def network_mode_for(self, phase: Phase) -> NetworkMode:
        """The policy of one phase, resolved as Harbor does: ``[agent]`` and ``[verifier]``
        override ``[environment]``; the verifier's baseline is ``[verifier.environment]`` when
        the task has one. ``setup`` is the environment's own (the Dockerfile, setup.sh)."""
        baseline = self.environment.network_mode or "no-network"
        if phase == "agent":
            return self.agent.network_mode or baseline
        if phase == "verifier":
            if self.verifier.network_mode is not None:
                return self.verifier.network_mode
            if self.verifier.environment is not None:
                return self.verifier.environment.network_mode or "no-network"
        return baseline

    def network_for(self, phase: Phase) -> bool:
        """True: the phase runs on the host's network; False: in a network namespace of its own.

        ``allowlist`` never gets here (refused when the file is read); anything but ``public``
        is no network, so an unknown policy fails closed."""
        return self.network_mode_for(phase) == "public"


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
        known = _hashes.get((self.path, parts))
        if known is not None and known[0] == stamp:
            return known[1]
        h = hashlib.sha256()
        for f in files:
            rel = f.relative_to(self.path).as_posix()
            h.update(f"{rel}\0{f.lstat().st_mode:o}\0".encode())
            h.update(os.readlink(f).encode() if f.is_symlink() else f.read_bytes())
        digest = h.hexdigest()[:16]
        _hashes[(self.path, parts)] = (stamp, digest)
        return digest


_hashes: dict[tuple[Path, tuple[str, ...]], tuple[tuple[tuple[object, ...], ...], str]] = {}
"""The last hash of each (folder, parts) and the file stamps it was made from: one entry per
folder and part list this process hashed."""


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


@lru_cache(maxsize=4096)
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
    prompt = _read_text(
        instruction,
        MAX_INSTRUCTION_BYTES,
        "it is the prompt, sent to the model at every step. Put large material in "
        "environment/ (the agent's workspace) and name it in instruction.md",
    )
    toml_path = path / "task.toml"
    raw: dict[str, Any] = {}
    if toml_path.is_file():
        text = _read_text(toml_path, MAX_TOML_BYTES, "a task.toml holds settings, not data")
        try:
            raw = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{toml_path} is not valid TOML: {e}") from None
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{toml_path}: {_problems(e)}") from None
    return TaskFolder(path=path, name=path.name, instruction=prompt, config=config)


def _read_text(path: Path, limit: int, why: str) -> str:
    """A UTF-8 file of at most ``limit`` bytes (never reading more than that)."""
    with path.open("rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ConfigError(
            f"{path}: {path.stat().st_size} bytes is more than the {limit >> 10} KiB this file "
            f"may hold: {why}"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start}); save it as UTF-8") from None


def _problems(e: ValidationError) -> str:
    """``field.path: message; ...`` for every problem, without pydantic's ``Value error,``."""
    out = []
    for err in e.errors():
        where = ".".join(str(x) for x in err["loc"]) or "top level"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] not in ("value_error", "missing") and "input" in err:
            msg += f" (got {err['input']!r})"
        out.append(f"{where}: {msg}")
    return "; ".join(out)


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
