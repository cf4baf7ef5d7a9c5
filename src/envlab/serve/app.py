"""The FastAPI application of ``envlab serve``: OpenEnv's routes over envlab's sessions.

Routes (as OpenEnv 0.10's server has them and its clients use them):

- ``/ws``: the session; frames in ``envlab.serve.wire``. One session per connection, up to
  ``max_sessions`` (beyond: an error frame with code ``capacity``, then the socket is closed).
  A connection silent for ``idle_timeout`` seconds gets an ``idle_timeout`` error frame and is
  closed; a disconnect closes its episode (and sandbox) at once.
- ``GET /health``, ``GET /schema``, ``GET /metadata``.
- HTTP episodes that really keep their state: ``POST /reset`` opens a session (or resets the one
  named) and answers its id (header ``X-Envlab-Session`` and field ``session_id``); ``POST
  /step``, ``GET /state`` and ``POST /close`` need it back (header, ``session_id`` field or
  query parameter). Idle HTTP sessions are reaped after ``idle_timeout``.
- Task API: ``GET /list_environments``, ``POST /{env}/tasks`` (``{"split", "seed", "n"}`` ->
  ``{"tasks": [{"id", "prompt", "split"}], "env_name"}``), ``POST /{env}/num_tasks``,
  ``POST /{env}/task`` (``{"split", "index"}``). Tasks show what an agent may see, never answers.
"""

import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from envlab.core import ConfigError
from envlab.serve import wire
from envlab.serve.sessions import CapacityError, Session, SessionManager
from envlab.serve.wire import WireError

if TYPE_CHECKING:
    from fastapi import FastAPI

    from envlab.core import EnvSpec, Limits

_HTTP_STATUS = {
    wire.CAPACITY: 503,
    wire.BAD_REQUEST: 400,
    wire.EPISODE_ORDER: 409,
    wire.ENV_ERROR: 500,
    wire.INFRA_ERROR: 503,
}


def create_app(
    spec: "EnvSpec",
    *,
    max_sessions: int = 64,
    idle_timeout: float = 600.0,
    limits: "Limits | None" = None,
) -> "FastAPI":
    """The server of ``spec``; ``app.state.sessions`` is its ``SessionManager``. ``limits``: the
    user's limit overrides, set over each task's own."""
    from fastapi import FastAPI

    if max_sessions < 1:
        raise ConfigError(f"--max-sessions must be >= 1, got {max_sessions}")
    if idle_timeout <= 0:
        raise ConfigError(f"--idle-timeout must be > 0 seconds, got {idle_timeout}")
    manager = SessionManager(
        spec, max_sessions=max_sessions, idle_timeout=idle_timeout, limits=limits
    )

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        manager.start_reaper()
        try:
            yield
        finally:  # a shutdown closes every episode
            await manager.stop_reaper()
            await manager.close_all()

    app = FastAPI(title=f"envlab serve {spec.name}", lifespan=lifespan)
    app.state.sessions = manager
    _add_ws(app, manager)
    _add_info_routes(app, manager)
    _add_http_episode_routes(app, manager)
    _add_task_routes(app, manager)
    return app


def _add_ws(app: "FastAPI", manager: SessionManager) -> None:
    from starlette.routing import WebSocketRoute

    from envlab.serve.ws import WebSocketEndpoint

    app.router.routes.append(WebSocketRoute(wire.WS_PATH, WebSocketEndpoint(manager)))


def _add_info_routes(app: "FastAPI", manager: SessionManager) -> None:
    spec = manager.spec

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "healthy",
            "active_sessions": len(manager.sessions),
            "max_sessions": manager.max_sessions,
            "live_episodes": manager.live_episodes,
        }

    @app.get("/metadata")
    async def metadata() -> dict[str, Any]:
        from envlab import __version__

        return {
            "name": spec.name,
            "description": spec.description or None,
            "version": spec.version,
            "content_hash": spec.content_hash(),
            "server": f"envlab {__version__}",
            "max_sessions": manager.max_sessions,
        }

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {
            "action": wire.ActionData.model_json_schema(),
            "observation": wire.StepData.model_json_schema(),
            "state": wire.StateData.model_json_schema(),
            "reset": wire.ResetData.model_json_schema(),
        }


def _http_error(e: "WireError | CapacityError") -> Any:
    from fastapi.responses import JSONResponse

    code = wire.CAPACITY if isinstance(e, CapacityError) else e.code
    return JSONResponse(
        {"detail": {"message": str(e), "code": code}}, status_code=_HTTP_STATUS.get(code, 400)
    )


def _add_http_episode_routes(app: "FastAPI", manager: SessionManager) -> None:
    from fastapi import Request
    from fastapi.responses import JSONResponse

    async def body_of(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise WireError(f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise WireError("the body must be a JSON object")
        return body

    def session_of(request: Request, body: dict[str, Any], required: bool) -> Session | None:
        sid = (
            request.headers.get(wire.SESSION_HEADER)
            or body.pop("session_id", None)
            or request.query_params.get("session_id")
        )
        if sid is None:
            if required:
                raise WireError(
                    "no session: POST /reset first and send its session id back (header "
                    f"{wire.SESSION_HEADER} or field session_id); HTTP episodes keep their state "
                    "in that session"
                )
            return None
        session = manager.sessions.get(str(sid))
        if session is None or session.kind != "http":
            raise WireError(
                f"no HTTP session {sid!r}: it was closed, reaped after "
                f"{manager.idle_timeout}s idle, or never existed; POST /reset for a new one",
                wire.EPISODE_ORDER,
            )
        if session.busy:
            raise WireError("a request of this session is still running", wire.EPISODE_ORDER)
        return session

    def answer(session: Session, data: dict[str, Any]) -> Any:
        data = {**data, "session_id": session.id}
        return JSONResponse(data, headers={wire.SESSION_HEADER: session.id})

    @app.post("/reset")
    async def http_reset(request: Request) -> Any:
        opened = None
        try:
            body = await body_of(request)
            session = session_of(request, body, required=False)
            if session is None:
                session = opened = manager.open("http")
            return answer(session, await session.reset(body))
        except (WireError, CapacityError) as e:
            if opened is not None:
                await manager.close(opened)
            return _http_error(e)

    @app.post("/step")
    async def http_step(request: Request) -> Any:
        try:
            body = await body_of(request)
            session = session_of(request, body, required=True)
            assert session is not None
            action = body.get("action")
            if not isinstance(action, dict):
                raise WireError('the body of /step is {"action": {...}, "session_id": ...}')
            return answer(session, await session.step(action))
        except WireError as e:
            return _http_error(e)

    @app.get("/state")
    async def http_state(request: Request) -> Any:
        try:
            session = session_of(request, {}, required=True)
            assert session is not None
            return answer(session, session.state().model_dump())
        except WireError as e:
            return _http_error(e)

    @app.post("/close")
    async def http_close(request: Request) -> Any:
        try:
            session = session_of(request, await body_of(request), required=True)
            assert session is not None
            await manager.close(session)
            return {"closed": session.id}
        except WireError as e:
            return _http_error(e)


def _add_task_routes(app: "FastAPI", manager: SessionManager) -> None:
    from fastapi import HTTPException

    spec = manager.spec

    def check(env_name: str) -> None:
        if env_name.lower() != spec.name.lower():
            raise HTTPException(404, f"unknown environment {env_name!r}; this is {spec.name!r}")

    def infos(req: wire.ListTasksRequest) -> list[dict[str, Any]]:
        tasks = manager.tasks(req.seed, req.split).head(req.n)
        return [wire.TaskInfo(id=t.id, prompt=t.prompt, split=t.split).model_dump() for t in tasks]

    @app.get("/list_environments")
    async def list_environments() -> list[str]:
        return [spec.name]

    @app.post("/{env_name}/tasks")
    async def list_tasks(env_name: str, req: wire.ListTasksRequest) -> dict[str, Any]:
        check(env_name)
        return {"tasks": infos(req), "env_name": spec.name}

    @app.post("/{env_name}/num_tasks")
    async def num_tasks(env_name: str, req: wire.ListTasksRequest) -> dict[str, Any]:
        check(env_name)
        return {"num_tasks": len(manager.tasks(req.seed, req.split))}

    @app.post("/{env_name}/task")
    async def get_task(env_name: str, req: wire.GetTaskRequest) -> dict[str, Any]:
        check(env_name)
        tasks = manager.tasks(req.seed, req.split)
        if not 0 <= req.index < len(tasks):
            raise HTTPException(400, f"no task at index {req.index}: {len(tasks)} tasks")
        t = tasks[req.index]
        return {"task": wire.TaskInfo(id=t.id, prompt=t.prompt, split=t.split).model_dump()}
