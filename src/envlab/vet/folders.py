"""What ``envlab vet`` reads from task folders: the prepared workspace, the tests, the answer
needles and where they are found, what the oracle wrote, and the second-phase probes built from
it (see :mod:`.informed`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from envlab.core import ConfigError, Task
from envlab.vet import checks as C
from envlab.vet.hacks import SKIP_DIRS, breaker_probes, git_probe, runs_git
from envlab.vet.informed import (
    answer_link_probes,
    answer_targets,
    forged_bytecode_probe,
    leak_copy_probes,
    oracle_answers,
    oracle_view,
    tampered_input_probes,
)
from envlab.vet.leak import (
    declared_inputs,
    drop_spec,
    expected_values,
    named_material,
    oracle_outputs,
    scan_env,
    scan_instruction,
    scan_workspace,
    split_hits,
)
from envlab.vet.plan import Episode, probe_episodes
from envlab.vet.probes import Probe


@dataclass(slots=True)
class FolderContext:
    task: Task
    tests_dir: Path
    tests_text: str
    solve: str
    env: dict[str, str]
    agent_network: bool = False
    """The task declares the agent's network public (``task.toml``)."""
    shared_verifier: bool = False
    """The tests run in the agent's environment, its processes alive (Harbor's shared mode)."""
    app_dir: Path | None = None
    """The prepared workspace (``/app``) on the host; ``None`` when it could not be built."""
    error: str | None = None

    @property
    def has_python(self) -> bool:
        if self.app_dir is None:
            return True
        for root, dirs, names in os.walk(self.app_dir):
            rel = "/" + os.path.relpath(root, self.app_dir) + "/"
            if any(s in rel for s in SKIP_DIRS):
                dirs[:] = []
            elif any(n.endswith(".py") for n in names):
                return True
        return False


def tests_text(tests_dir: Path) -> str:
    parts = []
    for p in sorted(tests_dir.rglob("*")) if tests_dir.is_dir() else []:
        if p.is_file() and p.stat().st_size < 1 << 20:
            parts.append(p.read_text(errors="replace"))
    return "\n".join(parts)


def task_folder(task: Task) -> Path | None:
    """The folder of ``task`` when it is a task folder (the Harbor format: its metadata's
    ``path`` names a folder with ``task.toml`` or ``instruction.md``), else ``None``. What vet
    reads of a task folder it reads from the folder, whichever environment runs it."""
    from envlab.envs.taskfolder import is_task_folder

    path = task.metadata.get("path")
    if not isinstance(path, str) or not path or not is_task_folder(Path(path)):
        return None
    return Path(path)


async def folder_context(task: Task) -> FolderContext:
    """What vet reads of a task folder: its tests, its solution, its environment variables and
    its prepared workspace (from the build cache, or built now, as an episode does)."""
    from envlab.envs.taskfolder import load_task_folder
    from envlab.envs.taskfolder.spec import default_images
    from envlab.sandbox.tasks.runtime import prepare_runtime

    path = task_folder(task)
    if path is None:
        raise ConfigError(f"task {task.id!r} is not a task folder (no task.toml at its path)")
    folder = load_task_folder(path)
    ctx = FolderContext(
        task=task,
        tests_dir=folder.tests_dir,
        tests_text=tests_text(folder.tests_dir),
        solve=folder.solution.read_text(errors="replace") if folder.solution else "",
        env=dict(folder.config.environment.env),
        agent_network=folder.config.network_for("agent"),
    )
    try:
        runtime = await prepare_runtime(folder, images=default_images())
        ctx.shared_verifier = runtime.verifier_mode == "shared"
        ctx.app_dir = await runtime.workspace_view()
        ctx.env = {**runtime.env, **ctx.env}
    except Exception as e:  # a task that cannot be built is reported, not fatal to vet
        ctx.error = f"{type(e).__name__}: {e}"[:500]
    return ctx


def oracle_workspace(ev: C.TaskEvidence) -> Path | None:
    """The copy of the oracle's final workspace, the evidence of the second phase. One that
    was written but is not here (``--backend ray``: the oracle ran on another host) stops vet
    rather than leave the evidence out quietly."""
    for t in ev.by_probe.get("oracle", []):
        after = t.info.get("after_grade", {})
        snap = after.get("workspace_snapshot")
        if snap and Path(snap).is_dir():
            return Path(snap)
        if snap:
            raise ConfigError(
                f"task {ev.task.id}: the oracle's workspace copy {snap} was written on host "
                f"{after.get('host', '?')} and is not on this one. With --backend ray on "
                "several hosts, give --out a directory every Ray node shares (NFS), or vet "
                "task folders with --backend local"
            )
    return None


def scan(ctx: FolderContext, ev: C.TaskEvidence) -> None:
    """Needles from the tests and the oracle's output; surfaces from the prepared workspace;
    the hits split into leak candidates and warnings (inside the material the instruction
    names); what the oracle changed."""
    ev.tests_text = ctx.tests_text
    ev.network_declared = ctx.agent_network
    ev.shared_verifier = ctx.shared_verifier
    if ctx.app_dir is None:
        ev.leak_error = ctx.error
        return
    root, prompt = ctx.app_dir, ctx.task.prompt
    after = oracle_workspace(ev)
    try:
        needles = expected_values(ctx.tests_dir)
        if after is not None:
            needles += oracle_outputs(root, after)
        needles = drop_spec(needles, ctx.solve)
        ev.leak_needles = len(needles)
        inputs = declared_inputs(root, prompt, ctx.solve)
        input_texts = [
            (root / rel).read_text(errors="replace")
            for rel in sorted(inputs)
            if (root / rel).stat().st_size < 4 << 20
        ]
        hits = (
            scan_instruction(needles, prompt, input_texts)
            + scan_env(needles, ctx.env)
            + scan_workspace(root, needles, inputs)
        )
        material = named_material(root, prompt)
        ev.leak_hits, ev.leak_warnings = split_hits(hits, material)
        ev.view = oracle_view(root, after, _material_files(root, material), ctx.tests_dir)
    except Exception as e:  # a scan that fails is reported, not fatal to vet
        ev.leak_error = f"{type(e).__name__}: {e}"[:500]


def _material_files(root: Path, material: set[str]) -> list[str]:
    out = set()
    for m in material:
        p = root / m[len("/app/") :]
        if p.is_file() and not p.is_symlink():
            out.add(m)
        elif p.is_dir():
            out |= {
                f"/app/{f.relative_to(root).as_posix()}"
                for f in p.rglob("*")
                if f.is_file() and not f.is_symlink() and ".git" not in f.relative_to(p).parts
            }
    return sorted(out)


def grades_validly(ev: C.TaskEvidence) -> bool:
    """Whether the verifier ever gave an honest episode a valid grade (else a second phase of
    probes cannot be judged)."""
    return any(
        t.scored and t.grader_failed is None
        for p in ("noop", "empty_answer", "oracle")
        for t in ev.by_probe.get(p, [])
    )


def plan_informed(
    ctx: FolderContext, ev: C.TaskEvidence, probe_dir: Path
) -> tuple[list[Episode], dict[str, Probe]]:
    """The second phase: probes built from what the oracle wrote and from the leak scan."""
    view = ev.view
    if view is None or not grades_validly(ev):
        return [], {}
    prompt = ctx.task.prompt
    targets = answer_targets(view, prompt)
    json_hint = any(t.endswith(".json") for t in targets) or "json" in ctx.tests_text
    probes: list[Probe] = [
        *breaker_probes(targets, json_hint=json_hint),
        *answer_link_probes(view, prompt, ctx.tests_text),
        *tampered_input_probes(view),
        *leak_copy_probes(ev.leak_hits, view, prompt),
    ]
    forged = forged_bytecode_probe(view)
    if forged is not None:
        probes.append(forged)
    if runs_git(ctx.tests_text):
        probes.append(git_probe(oracle_answers(view)))
    return probe_episodes(ctx.task, probes, probe_dir), {p.name: p for p in probes}
