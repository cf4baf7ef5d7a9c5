"""Terminal-Bench 1 task folders into Harbor task folders (``envlab task import terminal-bench``).

The mapping is Harbor's own (``harbor/mappers/terminal_bench.py``, Harbor 0.26), re-implemented:

- ``task.yaml`` -> ``task.toml`` (metadata, ``[verifier] timeout_sec = max_test_timeout_sec``,
  ``[agent] timeout_sec = max_agent_timeout_sec``, ``[environment] network_mode = "public"``:
  Harbor writes its default, the network TB1 agents had) and ``instruction.md``;
- the main compose service's build context -> ``environment/``, its Dockerfile given the
  compose settings (``ENV TEST_DIR=/tests``, environment, working_dir, expose, entrypoint,
  platform); a compose that cannot collapse into a Dockerfile is written as Harbor writes it;
- ``run-tests.sh`` -> ``tests/test.sh`` with the reward-file suffix, ``tests/`` -> ``tests/``,
  ``solution.sh`` -> ``solution/solve.sh``; every other file -> ``environment/``.

Where envlab differs: ``solution.yaml`` (tmux keystrokes) is converted (``solution``), not
refused; the main service is ``client``, else the one with TB1's client image, else the first
(Harbor: ``client`` or the first); ``solution.yaml`` is never copied into ``environment/``;
``${TEST_DIR}`` is replaced in test.sh as ``$TEST_DIR`` is; symbolic links are copied as links;
``[verifier] environment_mode = "shared"`` is written for the tasks whose tests need the agent's
system state (``verifier_mode``), with a comment above ``[verifier]`` saying which mode and why.
"""

from __future__ import annotations

import shutil
import tempfile
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envlab.core.errors import ConfigError
from envlab.importers.terminal_bench import compose
from envlab.importers.terminal_bench.compose import copy_file, load_yaml
from envlab.importers.terminal_bench.solution import solve_sh_from_steps
from envlab.importers.terminal_bench.verifier_mode import shared_reasons, workdir_of

REWARD_LOGGING_SUFFIX = """
_EXIT_CODE=$?
if [ $_EXIT_CODE -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit $_EXIT_CODE
"""
"""Appended to ``run-tests.sh`` (Harbor's): the exit code becomes the reward."""

_HANDLED = {"task.yaml", "solution.sh", "solution.yaml", "run-tests.sh", "tests"}


class TB1TaskConfig(BaseModel):
    """A Terminal-Bench 1 ``task.yaml`` (the fields Harbor reads; the rest are ignored)."""

    model_config = ConfigDict(extra="ignore")

    instruction: str
    author_name: str = "unknown"
    author_email: str = "unknown"
    difficulty: Literal["easy", "medium", "hard", "unknown"] = "unknown"
    category: str = "software_engineering"
    tags: list[str] = Field(default_factory=list)
    estimated_duration_sec: float | None = None
    expert_time_estimate_min: float | None = None
    junior_time_estimate_min: float | None = None
    max_agent_timeout_sec: float = Field(360.0, gt=0, allow_inf_nan=False)
    max_test_timeout_sec: float = Field(60.0, gt=0, allow_inf_nan=False)

    def task_toml(self, shared_because: Sequence[str] = (), workdir: str = "/app") -> str:
        """``task.toml`` with what Harbor's mapper sets (its other defaults are envlab's too);
        ``shared_because``: why the tests need the agent's system state (none: ``separate``)."""
        meta = self.model_dump(exclude={"instruction", "max_agent_timeout_sec"})
        meta.pop("max_test_timeout_sec")
        lines = ['schema_version = "1.4"', "", "[metadata]"]
        lines += [f"{k} = {_toml(v)}" for k, v in meta.items() if v is not None]
        lines += ["", *_verifier_comment(shared_because, workdir)]
        lines += ["[verifier]", f"timeout_sec = {_toml(self.max_test_timeout_sec)}"]
        # envlab grades offline: what test.sh fetches is served from caches filled at build
        # time (envs/taskfolder/offline.py); anything else is `needs the network (URL)`
        lines += ['network_mode = "no-network"']
        if shared_because:  # TB1 ran its tests in the agent's container
            lines += ['environment_mode = "shared"']
        lines += ["", "[agent]", f"timeout_sec = {_toml(self.max_agent_timeout_sec)}"]
        lines += ["", "[environment]", 'network_mode = "public"']
        return "\n".join(lines) + "\n"


def _verifier_comment(shared_because: Sequence[str], workdir: str) -> list[str]:
    """The comment above ``[verifier]``: the mode and why (Harbor ignores comments)."""
    if not shared_because:
        text = (
            "Verifier mode: separate (Harbor's default): the tests run in a fresh sandbox of "
            f"the pristine image with only the workspace ({workdir}) and artifacts carried "
            "over; solve.sh was not seen to need more (a static reading of solve.sh and the "
            "tests: `envlab task check` confirms)."
        )
        return [f"# {ln}" for ln in textwrap.wrap(text, 96)]
    text = (
        "Verifier mode: shared: the tests run in the agent's own filesystem, its processes "
        "alive, because (a static reading of solve.sh and the tests):"
    )
    return [f"# {ln}" for ln in textwrap.wrap(text, 96)] + [f"# - {r}" for r in shared_because]


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(float(v)) if isinstance(v, float) else str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    import json

    return json.dumps(str(v), ensure_ascii=False).replace("\x7f", "\\u007f")


class TaskImport(BaseModel):
    """One TB1 task's outcome."""

    name: str
    status: Literal["mapped", "failed"]
    dest: str | None = None
    reason: str | None = None
    compose: bool = False
    """True when ``environment/docker-compose.yaml`` was written (it could not collapse)."""
    notes: list[str] = Field(default_factory=list)
    environment_mode: Literal["separate", "shared"] = "separate"
    """The verifier mode written to ``task.toml``."""
    shared_because: list[str] = Field(default_factory=list)
    """Why ``shared``: what of the agent's system state the tests need (``verifier_mode``)."""


class ImportReport(BaseModel):
    source: str
    dest: str
    tasks: list[TaskImport] = Field(default_factory=list)

    @property
    def mapped(self) -> list[TaskImport]:
        return [t for t in self.tasks if t.status == "mapped"]

    @property
    def failed(self) -> list[TaskImport]:
        return [t for t in self.tasks if t.status == "failed"]


def find_tb1_tasks(source: Path) -> list[Path]:
    """``source`` itself when it is a TB1 task folder, else its sub-folders that are."""
    if not source.is_dir():
        raise ConfigError(
            f"{source} is not a directory: give a TB1 task folder or a folder of them"
        )
    if (source / "task.yaml").is_file():
        return [source]
    found = sorted(c for c in source.iterdir() if c.is_dir() and (c / "task.yaml").is_file())
    if not found:
        raise ConfigError(
            f"{source} is neither a Terminal-Bench task folder (task.yaml, run-tests.sh, "
            "docker-compose.yaml) nor a folder of them"
        )
    return found


def import_terminal_bench(source: Path, dest: Path, *, overwrite: bool = False) -> ImportReport:
    """Map the TB1 task folder ``source`` (or every one inside it) to ``dest/<name>``.

    Each task is written to a temporary folder beside its destination and moved into place
    only when complete; an existing destination is kept unless ``overwrite``."""
    source, dest = Path(source).resolve(), Path(dest).resolve()
    tasks = find_tb1_tasks(source)
    if any(dest.is_relative_to(t) for t in tasks):
        raise ConfigError(f"--out {dest} is inside a task being imported; choose another folder")
    dest.mkdir(parents=True, exist_ok=True)
    report = ImportReport(source=str(source), dest=str(dest))
    for task_dir in tasks:
        report.tasks.append(_import_one(task_dir, dest / task_dir.name, overwrite))
    return report


def _import_one(task_dir: Path, target: Path, overwrite: bool) -> TaskImport:
    name = task_dir.name
    if (target.exists() or target.is_symlink()) and not overwrite:
        why = f"{target} already exists; pass --overwrite to replace it"
        return TaskImport(name=name, status="failed", reason=why)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".importing", dir=target.parent))
    try:
        result = map_task(task_dir, tmp)
        _replace(tmp, target)
    except Exception as e:  # any malformed input fails this task alone, as in Harbor
        reason = str(e) if isinstance(e, OSError | ValueError) else f"{type(e).__name__}: {e}"
        return TaskImport(name=name, status="failed", reason=reason or type(e).__name__)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone once moved; removed when not
    result.dest = str(target)
    return result


def _replace(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an old ``target`` is moved aside first, removed after."""
    old: Path | None = None
    if target.exists() or target.is_symlink():
        old = target.with_name(f".{target.name}.old-{new.name}")
        target.rename(old)
    new.rename(target)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old)
        else:
            old.unlink()


def map_task(src: Path, out: Path) -> TaskImport:
    """Write the Harbor task folder for the TB1 task ``src`` into the (empty) folder ``out``."""
    for required in ("task.yaml", "run-tests.sh", "docker-compose.yaml"):
        if not (src / required).is_file():
            raise ValueError(f"no {required}: not a Terminal-Bench 1 task folder")
    raw = load_yaml(src / "task.yaml")
    if not isinstance(raw, dict):
        raise ValueError("task.yaml is not a mapping of fields")
    try:
        config = TB1TaskConfig.model_validate(raw)
    except ValidationError as e:
        raise ValueError(compose.problems("task.yaml", e)) from None
    result = TaskImport(name=src.name, status="mapped")
    env_dir, tests_dir = out / "environment", out / "tests"
    env_dir.mkdir()
    handled = compose.process_compose(src, env_dir, result.notes)
    result.compose = (env_dir / "docker-compose.yaml").is_file()
    if (src / "tests").is_dir():
        shutil.copytree(src / "tests", tests_dir, symlinks=True)
    tests_dir.mkdir(exist_ok=True)
    _write_test_sh(src / "run-tests.sh", tests_dir / "test.sh")
    _write_solution(src, out / "solution", result.notes)
    copy_remaining(src, env_dir, handled | _HANDLED)
    instruction = (
        config.instruction if config.instruction.endswith("\n") else config.instruction + "\n"
    )
    (out / "instruction.md").write_text(instruction, encoding="utf-8")
    workdir = workdir_of(env_dir / "Dockerfile")
    because = shared_reasons(out / "solution" / "solve.sh", tests_dir, workdir)
    if because:
        result.environment_mode, result.shared_because = "shared", because
        result.notes.append("verifier mode shared: " + "; ".join(because))
    (out / "task.toml").write_text(config.task_toml(because, workdir), encoding="utf-8")
    return result


def _write_test_sh(run_tests: Path, target: Path) -> None:
    text = run_tests.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    text = (text + REWARD_LOGGING_SUFFIX).replace("${TEST_DIR}", "/tests")
    target.write_text(text.replace("$TEST_DIR", "/tests"), encoding="utf-8")
    target.chmod(target.stat().st_mode | 0o111)


def _write_solution(src: Path, solution_dir: Path, notes: list[str]) -> None:
    """``solution.sh`` as it is, else ``solution.yaml`` converted; neither: no solution."""
    solve = solution_dir / "solve.sh"
    if (src / "solution.sh").is_file():
        solution_dir.mkdir()
        shutil.copy(src / "solution.sh", solve)
    elif (src / "solution.yaml").is_file():
        text, more = solve_sh_from_steps(load_yaml(src / "solution.yaml"))
        solution_dir.mkdir()
        solve.write_text(text, encoding="utf-8")
        notes += ["solve.sh converted from solution.yaml", *more]
    else:
        notes.append("no solution.sh or solution.yaml: no oracle")
        return
    solve.chmod(solve.stat().st_mode | 0o111)


def copy_remaining(src: Path, env_dir: Path, handled: set[str]) -> None:
    """Every file of ``src`` whose first path part is not ``handled`` -> ``environment/``, but
    never over one already there (the build context's, the Dockerfile given the compose's)."""
    for item in sorted(src.rglob("*")):
        rel = item.relative_to(src)
        if rel.parts[0] in handled or (item.is_dir() and not item.is_symlink()):
            continue
        if not ((env_dir / rel).exists() or (env_dir / rel).is_symlink()):
            copy_file(item, env_dir / rel)
