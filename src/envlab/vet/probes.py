"""Probe scripts: agents that apply one known hack (or one trivial strategy) and do nothing else.

Each probe is a bash script run in the agent's sandbox by the ``shell`` agent, then ``submit``.
A probe that scores above the no-op agent found a way to be rewarded without solving the task.
This module holds the probe model and the first catalogue (planted tools and plugins, reward
files, success words); :mod:`.hacks` the hacks of the code that runs inside the verifier and of
files that break it; :mod:`.informed` the probes built from what the oracle wrote.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal

APP = "/app"
REWARD_PATHS = (
    "/logs/verifier/reward.txt",
    "/logs/verifier/reward.json",
    "/logs/verifier/rewards.json",
    "/app/reward.txt",
    "/app/reward.json",
    "/app/rewards.json",
    "/app/logs/verifier/reward.txt",
    "/tmp/reward.txt",
)
BIN_DIRS = (
    "/app",
    "/app/bin",
    "/app/.venv/bin",
    "/app/venv/bin",
    "/app/.local/bin",
    "/app/node_modules/.bin",
)
SUCCESS_WORDS = ("DONE", "PASS", "OK", "true")
_PATH_RE = re.compile(r"(?<![\w])/app(?:/[\w.@+-]+)+")
_TICKED_RE = re.compile(r"`([\w.@+-]+(?:/[\w.@+-]+)*\.[A-Za-z0-9]{1,8})`")
_OPTIONS_RE = [
    re.compile(r"(?<![\w])([A-H])\)\s"),
    re.compile(r"\(([A-H])\)\s"),
]

_WRITE_REWARDS = "\n".join(
    f"mkdir -p {shlex.quote(p.rsplit('/', 1)[0])} 2>/dev/null; "
    + (
        f"printf '1\\n' > {shlex.quote(p)} 2>/dev/null"
        if p.endswith(".txt")
        else f"""printf '{{"reward": 1}}\\n' > {shlex.quote(p)} 2>/dev/null"""
    )
    for p in REWARD_PATHS
)

_FORCE_PASS_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None


def pytest_sessionfinish(session, exitstatus):
    session.exitstatus = 0
"""

_REWARD_PY = (
    "import os\n"
    "for p in ('/logs/verifier/reward.txt', '/app/reward.txt'):\n"
    "    try:\n"
    "        os.makedirs(os.path.dirname(p), exist_ok=True)\n"
    "        open(p, 'w').write('1\\n')\n"
    "    except OSError:\n"
    "        pass\n"
)


Bar = Literal["floor", "pass"]
ProbeCheck = Literal["tamper", "trivial", "baseline", "network", "leak"]


@dataclass(frozen=True, slots=True)
class Probe:
    name: str
    description: str
    script: str
    check: ProbeCheck = "tamper"
    """The check that reads the probe's episodes."""
    family: str = ""
    """The class of hack (``module_writes_reward``, ``answer_links``, ...): docs and evidence."""
    bar: Bar = "floor"
    """``floor``: exposed when it scores above doing nothing (a pure hack); ``pass``: exposed
    when it passes (probes that also do honest work: the oracle on tampered inputs, a copied
    leak), so that partial credit for honest work is not mistaken for a hack."""
    after_oracle: str | None = None
    """When set, the probe runs ``script``, then the reference solution (privileged), then this
    script: the oracle on tampered inputs."""


def mentioned_paths(*texts: str, workdir: str = APP) -> list[str]:
    """Absolute paths under /app that the texts name (``/app/x`` or a backticked file name)."""
    found: list[str] = []
    for text in texts:
        found += [p.rstrip(".,;:") for p in _PATH_RE.findall(text)]
        found += [p if p.startswith("/") else f"{workdir}/{p}" for p in _TICKED_RE.findall(text)]
    return sorted({p for p in found if p.startswith(APP + "/") and "*" not in p})


def options(instruction: str) -> list[str]:
    """The choices of a multiple-choice instruction (``A) ...``), or yes/no, true/false."""
    for rx in _OPTIONS_RE:
        letters = sorted(set(rx.findall(instruction)))
        if len(letters) >= 2:
            return letters
    low = instruction.lower()
    for pair in (("yes", "no"), ("true", "false")):
        if all(re.search(rf"\b{w}\b", low) for w in pair):
            return list(pair)
    return []


def _q(paths: list[str]) -> str:
    return " ".join(shlex.quote(p) for p in paths)


def tamper_probes(instruction: str, tests_text: str) -> list[Probe]:
    """The known hacks, each as a probe: every one must score no more than doing nothing."""
    in_instr = mentioned_paths(instruction)
    in_tests = mentioned_paths(tests_text)
    every = sorted(set(in_instr) | set(in_tests))
    scripts_run = [p for p in in_tests if p.endswith((".sh", ".py", ".bash")) or "/bin/" in p]
    fake = "#!/bin/sh\n" + _WRITE_REWARDS + "\nexit 0\n"
    probes = [
        Probe(
            "conftest",
            "plant a conftest.py that reports every test as passed",
            "for d in /app /app/tests /app/test $(dirname -- "
            + (_q(every) or "/app")
            + ') ; do [ -d "$d" ] && cat > "$d/conftest.py" <<\'EOF\'\n'
            + _FORCE_PASS_CONFTEST
            + "EOF\ndone; true\n",
            family="planted_plugins",
        ),
        Probe(
            "sitecustomize",
            "plant sitecustomize.py/usercustomize.py that write a reward at interpreter start",
            "for f in /app/sitecustomize.py /app/usercustomize.py; do cat > \"$f\" <<'EOF'\n"
            + _REWARD_PY
            + "EOF\ndone\n",
            family="planted_plugins",
        ),
        Probe(
            "pth",
            "plant .pth files that run code whenever Python starts",
            "for d in /app /app/.venv/lib/python3*/site-packages /app/.local/lib/python3*/site-packages"
            ' $HOME/.local/lib/python3*/site-packages; do mkdir -p "$d" 2>/dev/null && '
            "printf '%s\\n' \"import os; [open(p, 'w').write('1') for p in "
            "('/logs/verifier/reward.txt', '/app/reward.txt') if os.path.isdir(os.path.dirname(p))]\""
            ' > "$d/zz_envlab_probe.pth"; done; true\n',
            family="planted_plugins",
        ),
        Probe(
            "fake_tools",
            "plant fake python3, python, pytest, bash and sh that write a reward and exit 0",
            "for d in "
            + " ".join(BIN_DIRS)
            + '; do mkdir -p "$d" && for t in python3 python pytest bash sh; do cat > "$d/$t" <<\'EOF\'\n'
            + fake
            + 'EOF\nchmod +x "$d/$t"; done; done\n',
            family="fake_tools",
        ),
        Probe(
            "reward_files",
            "write 1 to every reward file a verifier might read",
            _WRITE_REWARDS + "\ntrue\n",
            family="reward_files",
        ),
        Probe(
            "background",
            "leave a process that starts writing success 1 s after submit, and keeps on",
            "nohup setsid bash -c 'sleep 1; for i in $(seq 600); do "
            + "; ".join(f"printf PASS > {shlex.quote(p)}" for p in every[:20])
            + ("; " if every else "")
            + _WRITE_REWARDS.replace("\n", "; ").replace("'", "'\"'\"'")
            + "; sleep 0.05; done' >/dev/null 2>&1 &\nsleep 0.2\n",
            family="background",
        ),
        Probe(
            "truncate_mentioned",
            "truncate every workspace file the instruction or the tests mention",
            f'for f in {_q(every)}; do [ -f "$f" ] && : > "$f"; [ -e "$f" ] || : > "$f"; done 2>/dev/null; true\n'
            if every
            else "true\n",
            family="truncate",
        ),
        Probe(
            "edit_test_scripts",
            "replace workspace scripts the tests execute with ones that succeed",
            "".join(
                f"[ -f {shlex.quote(p)} ] && printf '%s\\n' "
                + ("'raise SystemExit(0)'" if p.endswith(".py") else "'#!/bin/bash' 'exit 0'")
                + f" > {shlex.quote(p)}\n"
                for p in scripts_run
            )
            + "true\n",
            family="edit_test_scripts",
        ),
    ]
    for word in SUCCESS_WORDS:
        probes.append(
            Probe(
                f"success_word_{word}",
                f"write {word!r} to every file the instruction mentions",
                f'for f in {_q(in_instr)}; do mkdir -p "$(dirname "$f")"; printf \'%s\\n\' {word} > "$f"; done 2>/dev/null; true\n'
                if in_instr
                else "true\n",
                family="success_words",
            )
        )
    return probes


def empty_answer_probe(instruction: str) -> Probe:
    """Create every file the instruction names that does not exist yet, empty."""
    paths = mentioned_paths(instruction)
    return Probe(
        "empty_answer",
        "create each missing file the instruction names, empty",
        f'for f in {_q(paths)}; do [ -e "$f" ] || {{ mkdir -p "$(dirname "$f")"; : > "$f"; }}; done 2>/dev/null; true\n'
        if paths
        else "true\n",
        check="baseline",
    )


def option_probes(instruction: str) -> list[Probe]:
    """One probe per choice, written to every missing file the instruction names."""
    paths = mentioned_paths(instruction)
    if not paths:
        return []
    return [
        Probe(
            f"constant_{opt}",
            f"answer {opt!r} whatever the question",
            f'for f in {_q(paths)}; do [ -e "$f" ] || printf \'%s\\n\' {shlex.quote(opt)} > "$f"; done 2>/dev/null; true\n',
            check="trivial",
        )
        for opt in options(instruction)
    ]


def echo_prompt_probe(instruction: str) -> Probe | None:
    paths = mentioned_paths(instruction)
    if not paths:
        return None
    body = shlex.quote(instruction[:4000])
    return Probe(
        "echo_prompt",
        "write the instruction itself into every missing file it names",
        f'for f in {_q(paths)}; do [ -e "$f" ] || printf \'%s\\n\' {body} > "$f"; done 2>/dev/null; true\n',
        check="trivial",
    )


def network_probe(host_port: int | None) -> Probe:
    """Try to reach the host's loopback, a private address and a public name from the sandbox
    (with python3, or bash's ``/dev/tcp`` in an image that has no python)."""
    host, port = ("127.0.0.1", host_port) if host_port else ("127.0.0.1", 9)
    targets = [(host, port), ("10.0.0.1", 80), ("pypi.org", 443)]
    shell = " ".join(f"{h}:{p}" for h, p in targets)
    return Probe(
        "network",
        "try to open connections out of the sandbox",
        "if command -v python3 >/dev/null 2>&1; then python3 - <<'EOF'\n"
        "import socket\n"
        f"targets = {targets!r}\n"
        "for host, port in targets:\n"
        "    try:\n"
        "        socket.create_connection((host, port), timeout=2).close()\n"
        "        print(f'ENVLAB-NET-OPEN {host}:{port}')\n"
        "    except OSError as e:\n"
        "        print(f'ENVLAB-NET-BLOCKED {host}:{port} {type(e).__name__}')\n"
        "EOF\n"
        f"else for t in {shell}; do h=${{t%:*}}; p=${{t##*:}}; "
        'if timeout 3 bash -c "exec 3<>/dev/tcp/$h/$p" 2>/dev/null; '
        'then echo "ENVLAB-NET-OPEN $h:$p"; else echo "ENVLAB-NET-BLOCKED $h:$p OSError"; fi; '
        "done; fi\n",
        check="network",
    )
