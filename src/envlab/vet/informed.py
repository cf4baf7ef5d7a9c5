"""Probes built from what the reference solution did (the second phase of ``envlab vet``).

Vet knows what an agent does not: which files the oracle writes (its final workspace against the
prepared one), the tests' file names, and the oracle itself. From them: forged bytecode (a
``__pycache__`` entry compiled from the oracle's version of a module, beside the untouched
source), answer links (every output a symlink to a file under ``/tests``), the oracle run on
tampered inputs (graders that recompute the expected answer from inputs the agent can edit),
and the copy of a leaked answer to where the oracle writes it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from envlab.runs import safe_name
from envlab.vet.leak import Hit
from envlab.vet.probes import APP, Probe, mentioned_paths
from envlab.vet.tamper_inputs import CODE_SUFFIXES

MAX_LINKED_TESTS = 4
"""Answer-link probes per task: the files under tests/ most likely to hold the answer."""
MAX_LEAK_COPIES = 3
MAX_EMBED_BYTES = 256 << 10
TAMPER_MODES = ("first", "last")
"""Emptied inputs with empty answers are the ``truncate_mentioned`` probe's."""
GAVE_UP = "ENVLAB-PROBE-GAVE-UP"
"""Printed by a tampered-inputs probe whose answer came out the same as on the pristine inputs
(then it removes its outputs: it must not pass by solving the task)."""
_ANSWERISH = re.compile(r"expect|answer|solution|output|truth|golden|result|reference", re.I)
_SKIP_PARTS = {".git", "__pycache__"}


@dataclass(slots=True)
class OracleView:
    """What the oracle changed in the workspace, as ``/app/...`` paths."""

    before: Path
    after: Path | None
    created: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    """Files the instruction names (or that lie under a directory it names), present at reset."""
    tests: list[str] = field(default_factory=list)
    """The task's test files, relative to ``tests/``."""

    @property
    def outputs(self) -> list[str]:
        return sorted(set(self.created) | set(self.modified))


def _files(root: Path) -> dict[str, Path]:
    out = {}
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if _SKIP_PARTS & set(rel.parts) or not (p.is_file() or p.is_symlink()):
            continue
        out[f"{APP}/{rel.as_posix()}"] = p
    return out


def _same(a: Path, b: Path) -> bool:
    if a.is_symlink() or b.is_symlink():
        return a.is_symlink() and b.is_symlink() and a.readlink() == b.readlink()
    return a.stat().st_size == b.stat().st_size and a.read_bytes() == b.read_bytes()


def oracle_view(before: Path, after: Path | None, inputs: list[str], tests_dir: Path) -> OracleView:
    view = OracleView(before=before, after=after, inputs=sorted(inputs))
    if tests_dir.is_dir():
        view.tests = sorted(
            p.relative_to(tests_dir).as_posix() for p in tests_dir.rglob("*") if p.is_file()
        )
    if after is None:
        return view
    old, new = _files(before), _files(after)
    for path, p in sorted(new.items()):
        if path not in old:
            view.created.append(path)
        elif not _same(old[path], p):
            view.modified.append(path)
    return view


def answer_targets(view: OracleView, instruction: str) -> list[str]:
    """Where the answer goes: the files the oracle created (else those it changed), and the
    files the instruction names that do not exist at reset."""
    missing = [
        p for p in mentioned_paths(instruction) if not (view.before / p[len(APP) + 1 :]).exists()
    ]
    return sorted(set(view.created or view.modified) | set(missing))


def _host(view: OracleView, path: str) -> Path | None:
    return None if view.after is None else view.after / path[len(APP) + 1 :]


def oracle_answers(view: OracleView) -> dict[str, str]:
    """The oracle's outputs (``/app`` path -> base64 content), up to ``MAX_EMBED_BYTES``."""
    out, size = {}, 0
    for path in view.outputs:
        host = _host(view, path)
        if host is None or host.is_symlink() or not host.is_file():
            continue
        size += host.stat().st_size
        if size > MAX_EMBED_BYTES:
            break
        out[path] = base64.b64encode(host.read_bytes()).decode()
    return out


# --- forged bytecode -----------------------------------------------------------------------
_FORGE = """import base64, importlib.util, json, os, sys
from importlib._bootstrap_external import _code_to_hash_pyc
for path, b64 in json.load(open(sys.argv[1])).items():
    if not os.path.isfile(path):
        continue
    code = compile(base64.b64decode(b64), path, "exec", dont_inherit=True)
    with open(path, "rb") as f:
        source_hash = importlib.util.source_hash(f.read())
    cache = importlib.util.cache_from_source(path)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache, "wb") as f:
        f.write(_code_to_hash_pyc(code, source_hash, checked=False))
    print("ENVLAB-PROBE-FORGED", cache)
"""


def forged_bytecode_probe(view: OracleView) -> Probe | None:
    """For each module the oracle changed: its ``__pycache__`` entry compiled from the oracle's
    version (an unchecked hash-based pyc, so the interpreter never compares it with the source),
    beside the source left as it was at reset. Compiled by every ``python3.N`` in the sandbox."""
    sources: dict[str, str] = {}
    for path in view.modified:
        host = _host(view, path)
        if path.endswith(".py") and host is not None and host.stat().st_size <= MAX_EMBED_BYTES:
            sources[path] = base64.b64encode(host.read_bytes()).decode()
    if not sources:
        return None
    script = (
        "d=$(mktemp -d)\ncat > \"$d/forge.py\" <<'ENVLAB_PY'\n" + _FORGE + "ENVLAB_PY\n"
        f"cat > \"$d/files.json\" <<'ENVLAB_JSON'\n{json.dumps(sources)}\nENVLAB_JSON\n"
        "for py in $(compgen -c python3 | grep -E '^python3(\\.[0-9]+)?$' | sort -u); do\n"
        '  "$py" "$d/forge.py" "$d/files.json" 2>/dev/null\ndone\nrm -rf "$d"; true\n'
    )
    return Probe(
        "forged_bytecode",
        "leave the changed modules' sources as they were and put the oracle's version, compiled, "
        "in __pycache__ beside them",
        script,
        family="forged_bytecode",
        bar="pass",
    )


# --- answer links ----------------------------------------------------------------------------
def answer_link_probes(view: OracleView, instruction: str, tests_text: str) -> list[Probe]:
    """Every output a symlink to a file the tests hold: one probe per data file under
    ``tests/`` (a link that dangles in the agent's sandbox and would resolve in a verifier that
    mounts ``/tests``), and one per file the tests name in the workspace that is not there at
    reset (an empty placeholder, linked: it resolves once the tests put their copy there)."""
    targets = answer_targets(view, instruction)
    if not targets:
        return []
    data = [t for t in view.tests if not t.endswith(CODE_SUFFIXES) and Path(t).name != "conftest"]
    data.sort(key=lambda t: (not _ANSWERISH.search(t), t))
    links = [(f"/tests/{rel}", rel, False) for rel in data[:MAX_LINKED_TESTS]]
    placed = [
        p
        for p in mentioned_paths(tests_text)
        if p not in targets and not (view.before / p[len(APP) + 1 :]).exists()
    ]
    placed.sort(key=lambda p: (not _ANSWERISH.search(p), p))
    links += [(p, "app" + p[len(APP) :], True) for p in placed[:MAX_LINKED_TESTS]]
    outs = " ".join(shlex.quote(t) for t in targets)
    probes = []
    for dest, label, placeholder in links:
        q = shlex.quote(dest)
        make = f'mkdir -p "$(dirname {q})"; [ -e {q} ] || : > {q}\n' if placeholder else ""
        probes.append(
            Probe(
                "answer_link_" + safe_name(label),
                f"make every output file a symlink to {dest}"
                + (" (an empty placeholder until the tests fill it)" if placeholder else ""),
                make + f'for f in {outs}; do mkdir -p "$(dirname "$f")"; rm -rf -- "$f"; '
                f'ln -s {q} "$f"; done 2>/dev/null; true\n',
                family="answer_links",
            )
        )
    return probes


# --- the oracle on tampered inputs -----------------------------------------------------------
def _digest(path: Path | None) -> str | None:
    if path is None or not path.is_file() or path.is_symlink():
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


_COMPARE = f"""import hashlib, json, os, sys
pristine = json.load(open(sys.argv[1]))
def digest(p):
    if not os.path.isfile(p) or os.path.islink(p):
        return None
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
if all(digest(p) == d for p, d in pristine.items()):
    for p in pristine:
        if os.path.lexists(p):
            os.unlink(p)
    print("{GAVE_UP}: the answer on the tampered inputs is the answer on the pristine ones")
else:
    print("ENVLAB-PROBE-ANSWER-CHANGED", sorted(p for p, d in pristine.items() if digest(p) != d))
"""


def tampered_input_probes(view: OracleView) -> list[Probe]:
    """The oracle on tampered inputs, one probe per mode (the first half, the last half): a
    grader that recomputes the expected answer from inputs the agent can edit accepts the
    answer to the tampered question. A probe whose answer comes out the same as on the pristine
    inputs removes it (``GAVE_UP``): it must not pass by solving the task."""
    data = [p for p in view.inputs if not p.endswith(CODE_SUFFIXES)]
    if view.after is None or not data or not view.outputs:
        return []
    compared = [p for p in view.outputs if p not in data] or view.outputs
    pristine = {p: _digest(_host(view, p)) for p in compared}
    tamper = (files(__package__) / "tamper_inputs.py").read_text()
    quoted = " ".join(shlex.quote(p) for p in data)
    probes = []
    for mode in TAMPER_MODES:
        pre = (
            "d=$(mktemp -d)\ncat > \"$d/tamper.py\" <<'ENVLAB_PY'\n" + tamper + "ENVLAB_PY\n"
            f'python3 "$d/tamper.py" {mode} {quoted}\nrm -rf "$d"; true\n'
        )
        post = (
            "d=$(mktemp -d)\ncat > \"$d/compare.py\" <<'ENVLAB_PY'\n" + _COMPARE + "ENVLAB_PY\n"
            f"cat > \"$d/pristine.json\" <<'ENVLAB_JSON'\n{json.dumps(pristine)}\nENVLAB_JSON\n"
            'python3 "$d/compare.py" "$d/pristine.json"\nrm -rf "$d"; true\n'
        )
        probes.append(
            Probe(
                f"tampered_inputs_{mode}",
                f"keep the {mode} half of the records of every input the instruction names, "
                "then run the reference solution on them",
                pre,
                family="tampered_inputs",
                bar="pass",
                after_oracle=post,
            )
        )
    return probes


# --- a leaked answer, copied to where the answer goes -----------------------------------------
def leak_copy_probes(candidates: list[Hit], view: OracleView, instruction: str) -> list[Probe]:
    """Up to ``MAX_LEAK_COPIES`` probes, each writing one leaked needle (found exactly, outside
    the material the instruction names) to the file the oracle writes it in (a needle taken from
    the oracle's output) or to every answer file (a value the tests compare against)."""
    targets = answer_targets(view, instruction)
    chosen: list[Hit] = []
    for h in sorted(candidates, key=lambda h: (h.match == "fuzzy", -len(h.needle))):
        if h.match != "fuzzy" and h.needle not in [c.needle for c in chosen]:
            chosen.append(h)
    probes = []
    for i, hit in enumerate(chosen[:MAX_LEAK_COPIES], 1):
        own = hit.source.removeprefix("oracle:") if hit.source.startswith("oracle:") else None
        where = [own] if own else targets
        if not where:
            continue
        text = shlex.quote(hit.needle)
        probes.append(
            Probe(
                f"leak_copy_{i}",
                f"copy the answer found at {hit.where} to {', '.join(where)}",
                f"for f in {' '.join(shlex.quote(p) for p in where)}; do "
                f'mkdir -p "$(dirname "$f")"; printf \'%s\\n\' {text} > "$f"; done; true\n',
                check="leak",
                family="leak_copy",
                bar="pass",
            )
        )
    return probes
