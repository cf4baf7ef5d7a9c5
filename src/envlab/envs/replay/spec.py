"""``ReplaySpec``: an environment simulated from logged sessions, and its directory on disk.

``envlab sim-from-logs LOGS.jsonl --out DIR`` writes ``DIR/replay.json`` (the manifest) and
``DIR/logs.jsonl`` (the logs, copied byte for byte); ``load_env(DIR)`` (``envlab eval DIR``)
recognises a directory holding ``replay.json`` and loads it with ``load_replay_env``.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envlab.core import ConfigError, EnvSpec, Limits, Rubric, Task, TaskSet
from envlab.envs.replay import format as format_module
from envlab.envs.replay import index as index_module
from envlab.envs.replay import rubric as rubric_module
from envlab.envs.replay.episode import ANSWER_ATTR, LoggedUser, ReplayEpisode, user_script
from envlab.envs.replay.format import LogSession, dump_session, read_logs
from envlab.envs.replay.index import Answers, LoggedToolSpec, tool_specs
from envlab.envs.replay.rubric import (
    REPLAY_RUBRIC,
    confirmed_in,
    reference_calls,
    words_gates_in,
)
from envlab.envs.tau import strict as tau_strict
from envlab.envs.tau.users import UserSimulator

MANIFEST = "replay.json"
LOGS = "logs.jsonl"


class ReplayConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    match: Literal["exact", "fuzzy"] = "exact"
    """``fuzzy``: a call no session made is answered by the nearest logged call of the tool."""
    fuzzy_threshold: float = Field(0.85, gt=0.0, le=1.0)
    """The least similarity (difflib's ratio of the canonical arguments) of a fuzzy match."""
    user: Literal["scripted", "model"] = "scripted"
    """``scripted``: the logged user turns in order; ``model``: a model playing the goal."""
    user_model: str | None = None
    """The model-backed user's model, ``openai:MODEL@URL`` (with ``user=model``)."""
    user_temperature: float = Field(0.0, ge=0.0)
    user_max_tokens: int = Field(256, ge=1)
    max_user_turns: int = Field(20, ge=1)


class ReplaySpec(EnvSpec):
    """Tasks are the logged tasks that have a successful session (the first one is the task's
    reference); every session's tool calls answer the tools. ``digest`` names the logs in the
    content hash (``load_replay_env`` passes the file's sha256; default: of the sessions)."""

    Config = ReplayConfig
    config: ReplayConfig
    environment = ReplayEpisode
    description: ClassVar[str] = "An environment simulated from logged sessions (sim-from-logs)."

    def __init__(
        self,
        sessions: list[LogSession],
        config: Any = None,
        *,
        name: str = "replay",
        digest: str = "",
        **values: Any,
    ) -> None:
        self._name = name
        self._digest = (
            digest
            or hashlib.sha256("\n".join(dump_session(s) for s in sessions).encode()).hexdigest()
        )
        super().__init__(config, **values)
        if self.config.user == "model" and not self.config.user_model:
            raise ConfigError("user=model needs user_model=openai:MODEL@URL (the user's model)")
        self.sessions = sessions
        self._by_id = {s.session_id: s for s in sessions}
        self.tool_specs: dict[str, LoggedToolSpec] = tool_specs(sessions, ANSWER_ATTR)
        self.answers = Answers(sessions)
        self.writes = {n for n, t in self.tool_specs.items() if t.writes}
        self._tasks = self._make_tasks()

    @property
    def name(self) -> str:
        return self._name

    @property
    def rubric(self) -> Rubric:
        return REPLAY_RUBRIC

    def session(self, session_id: str) -> LogSession:
        return self._by_id[session_id]

    def _make_tasks(self) -> list[Task]:
        if not self.writes:
            raise ConfigError(
                "no session says which tools write (its `writes` list): the reward compares "
                "write calls, so without them every episode would pass. Add "
                '"writes": ["tool_name", ...] to the sessions (docs/logs.md)'
            )
        references: dict[str, LogSession] = {}
        for s in self.sessions:
            if s.outcome.success:
                references.setdefault(s.task_key, s)
        if not references:
            raise ConfigError(
                "no session has outcome.success = true: a task needs a successful session to "
                "replay and to grade against"
            )
        return [self._task(key, s) for key, s in references.items()]

    def _task(self, key: str, s: LogSession) -> Task:
        writes = reference_calls(s, self.writes)
        reads = reference_calls(s, self.writes, writing=False)
        return Task(
            id=key,
            prompt=s.goal or s.opening(),
            answer={
                "session_id": s.session_id,
                "writes": [list(w) for w in writes],
                "reads": [list(r) for r in dict.fromkeys(reads)],
                "confirmed": confirmed_in(s, self.writes),
                **words_gates_in(s, self.writes),
            },
            metadata={"goal": s.goal, "sessions": sum(x.task_key == key for x in self.sessions)},
            split=s.split,
        )

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        splits = sorted({t.split for t in self._tasks})
        if split not in splits:
            raise ConfigError(
                f"{self.name} has no split {split!r}; its splits: {', '.join(splits)}"
            )
        chosen = [t for t in self._tasks if t.split == split]
        return TaskSet(chosen[:n], seed=seed, name=self.name)

    def limits(self, task: Task) -> Limits:
        turns = sum(m.role == "assistant" for m in self.session(task.answer["session_id"]).messages)
        return Limits(max_steps=max(30, 3 * turns), step_timeout_s=300.0, episode_timeout_s=1800.0)

    def make_user(self, task: Task, seed: int | None) -> UserSimulator:
        cfg, s = self.config, self.session(task.answer["session_id"])
        if cfg.user == "scripted":
            return LoggedUser(*user_script(s))
        from envlab.envs.tau.model_user import ModelUser

        assert cfg.user_model is not None
        return ModelUser.from_spec(
            cfg.user_model,
            s.goal or s.opening(),
            temperature=cfg.user_temperature,
            max_tokens=cfg.user_max_tokens,
            seed=seed,
            max_turns=cfg.max_user_turns,
        )

    def _compute_hash(self) -> str:
        """The code and config (``EnvSpec``'s), the modules that read the logs, answer and
        grade (with τ's gate it reuses), and the logs' bytes."""
        h = hashlib.sha256(super()._compute_hash().encode())
        for module in (format_module, index_module, rubric_module, tau_strict):
            h.update(inspect.getsource(module).encode())
        h.update(self._digest.encode())
        return h.hexdigest()[:16]


class ReplayManifest(BaseModel):
    """``DIR/replay.json``."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["envlab-replay"] = "envlab-replay"
    version: int = 1
    name: str
    logs: str = LOGS
    logs_sha256: str
    sessions: int
    tasks: int
    tools: list[str]
    writes: list[str]
    source: str | None = None
    created_at: float = Field(default_factory=time.time)


def is_replay_dir(path: str | Path) -> bool:
    return (Path(path) / MANIFEST).is_file()


def build_sim(logs: str | Path, out_dir: str | Path, *, name: str | None = None) -> ReplayManifest:
    """Check ``logs`` (every line, and that they make tasks), then write the replay directory."""
    logs, out = Path(logs), Path(out_dir)
    sessions = read_logs(logs)
    raw = logs.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    name = name or f"replay-{out.resolve().name}"
    spec = ReplaySpec(sessions, name=name, digest=digest)
    if out.exists() and any(out.iterdir()) and not is_replay_dir(out):
        raise ConfigError(f"{out} exists and is not a replay directory: choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    (out / LOGS).write_bytes(raw)
    manifest = ReplayManifest(
        name=name,
        logs_sha256=digest,
        sessions=len(sessions),
        tasks=len(spec._tasks),
        tools=sorted(spec.tool_specs),
        writes=sorted(spec.writes),
        source=str(logs.resolve()),
    )
    (out / MANIFEST).write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest


def load_manifest(path: Path) -> ReplayManifest:
    try:
        return ReplayManifest.model_validate_json((path / MANIFEST).read_text())
    except (OSError, ValidationError, ValueError) as e:
        raise ConfigError(
            f"{path / MANIFEST} cannot be read as a replay manifest ({e}); build the directory "
            "again with `envlab sim-from-logs LOGS.jsonl --out DIR`"
        ) from None


def load_replay_env(path: str | Path, **config: Any) -> ReplaySpec:
    """The replay environment of a directory written by ``build_sim``, configured."""
    path = Path(path)
    manifest = load_manifest(path)
    logs = path / manifest.logs
    try:
        digest = hashlib.sha256(logs.read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"cannot read the logs of the replay environment {path}: {e}") from None
    if digest != manifest.logs_sha256:
        raise ConfigError(
            f"{logs} changed since the environment was built (sha256 {digest[:12]} != "
            f"{manifest.logs_sha256[:12]}); build it again with `envlab sim-from-logs`"
        )
    return ReplaySpec(read_logs(logs), name=manifest.name, digest=digest, **config)
