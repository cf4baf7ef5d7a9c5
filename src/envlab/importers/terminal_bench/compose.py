"""A Terminal-Bench 1 ``docker-compose.yaml`` into ``environment/`` (Harbor's mapping).

The main service's build context is copied; its Dockerfile gets the compose settings appended
under ``# Mapped from docker-compose.yaml``. A compose with more than one service, top-level keys
besides ``services``/``version``, or service keys a Dockerfile cannot say (``tmpfs``, ``ports``,
``networks``, volumes of its own) is also written to ``environment/docker-compose.yaml`` as
Harbor writes it: the main service renamed ``main``, the others kept, their contexts copied.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from envlab.core.errors import ConfigError

DOCKERFILE_FIELDS = {"environment", "working_dir", "expose", "entrypoint", "platform"}
IGNORED_FIELDS = {"build", "image", "container_name", "command", "volumes", "environment"}
TBENCH_DEFAULT_VOLUMES = {
    "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
    "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
}
TBENCH_DEFAULT_ENV = "TEST_DIR=${T_BENCH_TEST_DIR}"
CLIENT_IMAGE = "${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}"
HARBOR_MAIN_SERVICE: dict[str, Any] = {
    "build": {"context": "${CONTEXT_DIR}"},
    "image": "${MAIN_IMAGE_NAME}",
    "command": ["sh", "-c", "sleep infinity"],
    "environment": ["TEST_DIR=${TEST_DIR}"],
    "deploy": {"resources": {"limits": {"cpus": "${CPUS}", "memory": "${MEMORY}"}}},
}
HARBOR_REPLACES = {
    "build",
    "image",
    "container_name",
    "command",
    "environment",
    "volumes",
    "deploy",
}
SECTION = "# Mapped from docker-compose.yaml"


def main_service(services: dict[str, Any]) -> str:
    """``client``, else the service running TB1's client image, else the first."""
    if "client" in services:
        return "client"
    for name, svc in services.items():
        if isinstance(svc, dict) and svc.get("image") == CLIENT_IMAGE:
            return name
    return next(iter(services))


def build_context(service: dict[str, Any]) -> tuple[str, str]:
    """(context, Dockerfile name) of a service's ``build`` (a string is the context)."""
    build = service.get("build")
    if isinstance(build, str):
        return build, "Dockerfile"
    if isinstance(build, dict):
        return str(build.get("context", ".")), str(build.get("dockerfile", "Dockerfile"))
    return ".", "Dockerfile"


def can_collapse(data: dict[str, Any]) -> bool:
    """True when the compose says nothing a Dockerfile cannot (Harbor's test)."""
    services = data.get("services") or {}
    if len(services) != 1 or any(k not in ("services", "version") for k in data):
        return False
    service = next(iter(services.values()))
    for key, value in service.items():
        if key not in DOCKERFILE_FIELDS | IGNORED_FIELDS:
            return False
        if key == "volumes" and not set(map(str, value or [])) <= TBENCH_DEFAULT_VOLUMES:
            return False
    return True


def dockerfile_additions(service: dict[str, Any]) -> list[str]:
    """The Dockerfile lines that say what the compose service said."""
    lines = ["ENV TEST_DIR=/tests"]
    env = service.get("environment") or []
    pairs = env.items() if isinstance(env, dict) else [(str(e), None) for e in env]
    for key, value in pairs:
        text = key if value is None and not isinstance(env, dict) else f"{key}={value}"
        if text != TBENCH_DEFAULT_ENV:
            lines.append(f"ENV {text}")
    workdir = service.get("working_dir")
    if workdir and "${" not in str(workdir):
        lines.append(f"WORKDIR {workdir}")
    expose = service.get("expose")
    if expose is not None:
        lines += [f"EXPOSE {p}" for p in (expose if isinstance(expose, list) else [expose])]
    entry = service.get("entrypoint")
    if entry is not None:
        lines.append(f"ENTRYPOINT {json.dumps(entry if isinstance(entry, list) else [entry])}")
    return lines


def with_platform(text: str, platform: str) -> str:
    """Every ``FROM`` given ``--platform=platform`` (an existing flag replaced)."""
    text, n = re.subn(
        r"^(FROM\s+)--platform=\S+\s+(.+)$", rf"\1--platform={platform} \2", text, flags=re.M
    )
    if n:
        return text
    return re.sub(
        r"^FROM\s+(?!--platform)(.+)$", rf"FROM --platform={platform} \1", text, flags=re.M
    )


def append_to_dockerfile(path: Path, service: dict[str, Any], notes: list[str]) -> None:
    text = path.read_text(encoding="utf-8")
    if service.get("platform"):
        text = with_platform(text, str(service["platform"]))
        notes.append(f"FROM --platform={service['platform']}")
    additions = dockerfile_additions(service)
    if not text.endswith("\n"):
        text += "\n"
    text += f"\n{SECTION}\n" + "\n".join(additions) + "\n"
    if len(additions) > 1:
        notes.append(f"moved to the Dockerfile: {', '.join(additions[1:])}")
    path.write_text(text, encoding="utf-8")


def harbor_compose(data: dict[str, Any], main: str) -> dict[str, Any]:
    """The compose Harbor writes: main service ``main`` on Harbor's base, the others kept."""
    out: dict[str, Any] = {k: v for k, v in data.items() if k not in ("services", "version")}
    harbor_main = copy.deepcopy(HARBOR_MAIN_SERVICE)
    harbor_main |= {k: v for k, v in data["services"][main].items() if k not in HARBOR_REPLACES}
    services = {"main": harbor_main}
    services |= {n: s for n, s in data["services"].items() if n != main}
    return {**{"services": services}, **out}


def problems(name: str, e: ValidationError) -> str:
    """``name: field: message; ...`` for a pydantic error."""
    found = [f"{'.'.join(map(str, x['loc'])) or 'top level'}: {x['msg']}" for x in e.errors()]
    return f"{name}: " + "; ".join(found)


def load_yaml(path: Path) -> Any:
    """Parse a YAML file (PyYAML, imported here: only the importer needs it)."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigError("reading Terminal-Bench tasks needs PyYAML: pip install pyyaml") from None
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ValueError(f"{path.name} is not valid YAML: {e}") from None


def copy_file(item: Path, target: Path) -> None:
    """One file (a symbolic link stays a link), its folders made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.exists():
        target.unlink()
    shutil.copy(item, target, follow_symlinks=False)


def _copy_tree(src: Path, dst: Path) -> None:
    for item in sorted(src.rglob("*")):
        if item.is_file() or item.is_symlink():
            copy_file(item, dst / item.relative_to(src))


def _copy_main_context(src: Path, env_dir: Path, service: dict[str, Any]) -> tuple[str, Path]:
    """Copy the main build context; return (handled top-level name, Dockerfile path)."""
    context, name = build_context(service)
    context = context.removeprefix("./").rstrip("/") or "."
    dockerfile = env_dir / "Dockerfile"
    if context == ".":
        if (src / name).is_file():
            shutil.copy(src / name, dockerfile)
        return name, dockerfile
    where = (src / context).resolve()
    if not where.is_relative_to(src.resolve()) or not where.is_dir():
        raise ValueError(f"build context {context!r} is not a folder inside the task")
    _copy_tree(where, env_dir)
    if name != "Dockerfile" and (env_dir / name).is_file():
        (env_dir / name).rename(dockerfile)
    return Path(context).parts[0], dockerfile


def _copy_referenced(dockerfile: Path, src: Path, env_dir: Path) -> None:
    """tests/ and solution.sh into environment/ when the Dockerfile COPYs or ADDs them."""
    text = dockerfile.read_text(encoding="utf-8")
    for what in ("tests", "solution.sh"):
        refs = (f"{op} {p}{what}" for op in ("COPY", "ADD") for p in ("", "./"))
        if any(r in text for r in refs) and (src / what).exists():
            if (src / what).is_dir():
                _copy_tree(src / what, env_dir / what)
            elif not (env_dir / what).exists():
                shutil.copy(src / what, env_dir / what)


def process_compose(src: Path, env_dir: Path, notes: list[str]) -> set[str]:
    """Map ``src/docker-compose.yaml`` into ``env_dir``; return the top-level names handled."""
    data = load_yaml(src / "docker-compose.yaml")
    handled = {"docker-compose.yaml"}
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or not services:
        raise ValueError("docker-compose.yaml has no services")
    main = main_service(services)
    if not isinstance(services[main], dict):
        raise ValueError(f"docker-compose.yaml: service {main!r} is not a mapping")
    handled_name, dockerfile = _copy_main_context(src, env_dir, services[main])
    handled.add(handled_name)
    if dockerfile.is_file():
        _copy_referenced(dockerfile, src, env_dir)
        append_to_dockerfile(dockerfile, services[main], notes)
    else:
        notes.append("no Dockerfile: the environment is plain files")
    if can_collapse(data):
        return handled
    handled |= _copy_side_contexts(src, env_dir, services, main)
    _write_compose(harbor_compose(data, main), env_dir / "docker-compose.yaml")
    notes.append("kept a docker-compose.yaml: " + _why_not_collapsed(data, main))
    return handled


def _copy_side_contexts(src: Path, env_dir: Path, services: dict[str, Any], main: str) -> set[str]:
    handled: set[str] = set()
    for name, svc in services.items():
        context = build_context(svc)[0] if name != main and isinstance(svc, dict) else "."
        context = context.removeprefix("./").rstrip("/") or "."
        where = (src / context).resolve()
        if context != "." and where.is_dir() and where.is_relative_to(src.resolve()):
            _copy_tree(where, env_dir / context)
            handled.add(Path(context).parts[0])
    return handled


def _why_not_collapsed(data: dict[str, Any], main: str) -> str:
    services = data["services"]
    if len(services) > 1:
        return f"{len(services)} services ({', '.join(services)})"
    extra = [k for k in data if k not in ("services", "version")]
    keys = [k for k in services[main] if k not in DOCKERFILE_FIELDS | IGNORED_FIELDS]
    return ", ".join([*extra, *keys]) or "volumes of its own"


def _write_compose(data: dict[str, Any], target: Path) -> None:
    import yaml

    text = yaml.safe_dump(data, sort_keys=False)
    target.write_text(text.replace("${T_BENCH_TASK_DOCKER_NAME_PREFIX}", "hb"), encoding="utf-8")
