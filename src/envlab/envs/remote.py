"""``RemoteEnv``: an environment served by another process over OpenEnv's WebSocket protocol.

``envlab eval ws://HOST:PORT ...`` drives any server that speaks it: ``envlab serve`` (envlab's
own episode inside the frames, ``envlab.serve.wire``: tools, graded reward and components from
the server) or a plain OpenEnv server (``openenv.core.env_server.create_app``: its action schema
becomes one tool, its observations text, its rewards the frames' ``reward``). Each episode opens
one ``/ws`` connection (``remote_episode.RemoteEpisode``). What the spec knows of the server
(``/schema``, ``/metadata``, the Task API) is asked once, over HTTP, when first needed.
docs/remote.md says what maps to what and whose failure each failure is.
"""

from __future__ import annotations

import hashlib
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envlab.core import ConfigError, EnvSpec, Limits, Task, TaskSet
from envlab.envs.remote_episode import RemoteEpisode

HTTP_TIMEOUT_S = 30.0
"""Seconds for one HTTP request to the server (``/schema``, ``/metadata``, the Task API)."""


class RemoteConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str
    """``ws://HOST:PORT`` (or ``wss://``), optionally with a path prefix before ``/ws``."""
    mode: Literal["auto", "envlab", "openenv"] = "auto"
    """``envlab``: the server speaks envlab's episode (``envlab serve``); ``openenv``: a plain
    OpenEnv server; ``auto``: envlab's when ``/schema`` shows envlab's action and observation."""
    n_tasks: int = Field(10, ge=1)
    """Tasks ``remote-0..`` when the server has no Task API (each reset with its seed)."""
    reward: Literal["sum", "last"] = "sum"
    """A plain OpenEnv server's episode reward: the sum of its frames' rewards, or the last."""
    reward_range: tuple[float, float] | None = None
    """The range of that reward, normalised to [0, 1]; outside it the grade is not valid."""
    max_steps: int | None = Field(50, ge=1)
    """Steps of an episode on a plain OpenEnv server (envlab's server keeps its own limits)."""
    connect_timeout_s: float = Field(30.0, gt=0)
    """How long a refused or failing connection is tried again (a server restarting) before
    the attempt is an ``infra_error``."""
    ping_interval_s: float | None = Field(20.0, gt=0)
    """WebSocket keepalive: a connection silent past a ping is dropped (``infra_error``)."""
    max_frame_bytes: int = Field(64 * 2**20, ge=2**16)
    max_stored_bytes: int = Field(1 << 20, ge=2**10)
    """What the server's frames may store in one trajectory besides the conversation (the
    reset frame, steps' ``info``, the grade's ``details``); past it, cut with a note
    (``envs.remote_budget``)."""

    @field_validator("url")
    @classmethod
    def _ws_url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"{v!r} is not a ws:// or wss:// URL; write ws://HOST:PORT")
        return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class ServerUnreachable(ConfigError):
    """The server did not answer over HTTP: a wrong URL when the run starts (``ConfigError``),
    the machinery's failure (``InfraError``) when an episode's reset meets it."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What the spec asked the server once: its schemas, metadata and Task API."""

    schema: dict[str, Any]
    metadata: dict[str, Any]
    env_name: str | None
    envlab: bool

    @property
    def action_schema(self) -> dict[str, Any]:
        return self.schema.get("action") or {}


class RemoteEnv(EnvSpec):
    """An environment on a server speaking OpenEnv's ``/ws`` protocol (``envlab serve`` or
    OpenEnv's own). A remote environment's code is not visible: ``content_hash`` names the
    URL, the server's ``/schema`` and ``/metadata`` and this client's code, nothing more."""

    id = "remote"
    description = "An environment served over OpenEnv's WebSocket protocol (envlab serve, OpenEnv)"
    Config = RemoteConfig
    environment = RemoteEpisode
    config: RemoteConfig

    def __init__(self, config: Any = None, **values: Any) -> None:
        super().__init__(config, **values)
        self._info: ServerInfo | None = None
        self._tasks: dict[tuple[int, str], list[Task]] = {}

    # --- the server ---------------------------------------------------------------------------
    @property
    def ws_url(self) -> str:
        return f"{self.config.url}/ws"

    @property
    def http_url(self) -> str:
        parts = urlsplit(self.config.url)
        scheme = "https" if parts.scheme == "wss" else "http"
        return urlunsplit((scheme, parts.netloc, parts.path, "", ""))

    def server(self) -> ServerInfo:
        """The server's schemas and metadata, asked once (``ConfigError`` if unreachable)."""
        if self._info is None:
            schema = self._http("GET", "/schema")
            metadata = self._http("GET", "/metadata")
            names = self._http("GET", "/list_environments", missing_ok=True)
            env_name = names[0] if isinstance(names, list) and names else None
            mode = self.config.mode
            envlab = mode == "envlab" or (mode == "auto" and _speaks_envlab(schema, metadata))
            self._info = ServerInfo(schema, metadata or {}, env_name, envlab)
        return self._info

    def _http(self, method: str, path: str, body: Any = None, *, missing_ok: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.http_url + path,
            data=data,
            method=method,
            headers={"content-type": "application/json"} if data is not None else {},
        )
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_S) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            if missing_ok and e.code in (404, 405, 422, 501):
                return None
            raise ConfigError(
                f"the environment server at {self.http_url} answered {method} {path} with "
                f"HTTP {e.code}: {e.read()[:300]!r}; is it an OpenEnv server (envlab serve, "
                "openenv's create_app)?"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as e:
            reason = getattr(e, "reason", e)
            raise ServerUnreachable(
                f"cannot reach the environment server at {self.http_url} ({method} {path}: "
                f"{reason}); start it (e.g. `envlab serve ENV --port PORT`) or check the URL"
            ) from None

    # --- the spec -----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        """``remote:HOST:PORT[/PATH]``: which server (two remote environments rank apart)."""
        config = getattr(self, "config", None)  # not yet while a bad config is reported
        if config is None:
            return self.id
        parts = urlsplit(config.url)
        return f"{self.id}:{parts.netloc}{parts.path}"

    def tasks(self, *, seed: int = 0, n: int | None = None, split: str = "test") -> TaskSet:
        """The server's tasks (its Task API), else ``n_tasks`` tasks ``remote-0..`` whose
        reset is the episode's seed alone."""
        key = (seed, split)
        if key not in self._tasks:
            self._tasks[key] = self._server_tasks(seed, split)
        count = n if n is not None else self.config.n_tasks
        tasks = self._tasks[key] or self._synthetic(split, count)
        return TaskSet(tasks, seed=seed, name=f"remote {self.config.url}").head(n)

    def _synthetic(self, split: str, count: int) -> list[Task]:
        meta = self._task_metadata({})
        return [Task(id=f"remote-{i}", prompt="", split=split, metadata=meta) for i in range(count)]

    def _server_tasks(self, seed: int, split: str) -> list[Task]:
        info = self.server()
        if info.env_name is None:
            return []
        body: dict[str, Any] = {"split": split}
        if info.envlab:
            body["seed"] = seed
        answer = self._http("POST", f"/{info.env_name}/tasks", body, missing_ok=True)
        listed = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(listed, list):
            return []
        return [self._task(raw, i, split, seed, info) for i, raw in enumerate(listed)]

    def _task(self, raw: Any, index: int, split: str, seed: int, info: ServerInfo) -> Task:
        spec = raw if isinstance(raw, dict) else {"value": raw}
        task_id = str(spec.get("id", f"{split}-{index}"))
        if info.envlab:  # reset by id, on the task set the server made with this seed
            ref = {"task_id": task_id, "split": split, "task_seed": seed}
        else:  # OpenEnv's Task API: reset(split=, index=)
            ref = {"split": split, "index": spec.get("index", index)}
        prompt = next((str(spec[k]) for k in _PROMPT_KEYS if k in spec), "")
        answer = next((spec[k] for k in _ANSWER_KEYS if k in spec), None)
        return Task(
            id=task_id,
            prompt=prompt,
            answer=answer,
            split=split,
            metadata=self._task_metadata({"remote_task": ref, "server_task": spec}),
        )

    def _task_metadata(self, meta: dict[str, Any]) -> dict[str, Any]:
        if self.config.reward_range is not None:
            meta["reward_range"] = list(self.config.reward_range)
        return meta

    def limits(self, task: Task) -> Limits:
        if self.server().envlab:  # the server applies its spec's limits and grades at the end
            return self.default_limits.model_copy(update={"max_steps": None})
        return self.default_limits.model_copy(update={"max_steps": self.config.max_steps})

    def _compute_hash(self) -> str:
        info = self.server()
        h = hashlib.sha256(super()._compute_hash().encode())
        h.update(json.dumps([info.schema, info.metadata], sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]


_PROMPT_KEYS = ("prompt", "question", "instruction", "input")
_ANSWER_KEYS = ("answer", "solution", "target", "expected")


def _speaks_envlab(schema: Any, metadata: Any) -> bool:
    """Whether the server is ``envlab serve``: its ``/metadata`` says so, or ``/schema`` shows
    envlab's action (``text``, ``tool_calls``)."""
    if isinstance(metadata, dict) and str(metadata.get("server", "")).startswith("envlab "):
        return True
    if not isinstance(schema, dict):
        return False
    action = (schema.get("action") or {}).get("properties") or {}
    return {"text", "tool_calls"} <= set(action)


def is_remote_url(name: str) -> bool:
    return name.startswith(("ws://", "wss://"))


def load_remote_env(name: str, **kwargs: Any) -> RemoteEnv:
    """The ``RemoteEnv`` of the URL ``name`` (``load_env("ws://...")``), with ``kwargs``."""
    if "url" in kwargs:
        raise ConfigError(f"give the URL once: as ENV ({name!r}), not also as --env-arg url=")
    return RemoteEnv(url=name, **kwargs)


__all__ = [
    "RemoteConfig",
    "RemoteEnv",
    "ServerInfo",
    "ServerUnreachable",
    "is_remote_url",
    "load_remote_env",
]
