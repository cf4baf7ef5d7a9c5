"""Answer-leak scan: find the answer where an agent can read it at reset.

Needles are what a solution must produce: the hidden answer, lines the oracle adds to the
workspace, and the values the tests compare against. Needles the solution script itself spells
out (``printf 'Hello, world!'``) are the task's specification, not a secret, and are dropped.
Surfaces are the instruction, environment variables, every workspace file (hidden ones too),
members of archives, and every object of a ``.git`` directory, unreachable ones included.

A match is ``exact`` (the needle as a token), ``normalized`` (case, whitespace and thousands
separators ignored) or ``fuzzy`` (character 5-gram containment >= ``FUZZY_THRESHOLD`` for
needles of 24+ characters). Files the instruction or the solution names are the task's inputs:
a selection task's answer is always somewhere in its input (the warmest city is in the CSV), so
in inputs only a needle on a line that labels it (``answer``, ``expected``, ``solution``,
``total``, ``result``, ``correct``) counts. In the instruction, a needle counts unless it is
also in an input file.
"""

from __future__ import annotations

import base64
import binascii
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

FUZZY_THRESHOLD = 0.8
FUZZY_MIN_CHARS = 24
MAX_FILE_BYTES = 4 << 20
LABEL_RE = re.compile(r"answer|expect|solution|total|result|correct|grader", re.IGNORECASE)
_BORING = {"true", "false", "yes", "no", "none", "null", "pass", "fail", "ok", "done", "error"}


@dataclass(frozen=True, slots=True)
class Needle:
    text: str
    source: str

    @property
    def norm(self) -> str:
        return normalize(self.text)


@dataclass(frozen=True, slots=True)
class Hit:
    needle: str
    source: str
    where: str
    match: str
    similarity: float
    context: str
    full_needle: str = field(default="", compare=False)
    """The needle whole (``needle`` is cut at 200 characters for the evidence)."""

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.pop("full_needle")
        return d


def normalize(text: str) -> str:
    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())
    return re.sub(r"\s+", " ", text).strip()


def is_trivial(text: str) -> bool:
    """Too short or too common to mean anything when found (``0``, ``ok``, ``true``)."""
    n = normalize(text)
    core = re.sub(r"[\W_]", "", n)
    return len(n) < 3 or len(core) < 2 or n in _BORING


# --- needles -------------------------------------------------------------------------------
_CMP_VALUE = (
    r"""("(?P<dq>[^"$`\\\n]{1,400})"|'(?P<sq>[^'\n]{1,400})'"""
    r"""|(?P<num>-?\d[\d_.,]*\d|-?\d))"""
)
_CMP_RE = [
    re.compile(r"(?:==|!=|(?<![<>!=])=(?!=)|-eq|-ne|\bin)\s*" + _CMP_VALUE),
    re.compile(_CMP_VALUE + r"\s*(?:==|!=|-eq|-ne)"),
]


def expected_values(tests_dir: Path) -> list[Needle]:
    """Values the tests compare against, and the content of ``expected*`` files."""
    out: list[Needle] = []
    if not tests_dir.is_dir():
        return out
    for path in sorted(p for p in tests_dir.rglob("*") if p.is_file()):
        rel = path.relative_to(tests_dir).as_posix()
        text = _read_text(path)
        if text is None:
            continue
        if path.name.lower().startswith("expected"):
            if len(text) <= 4096 and text.strip():
                out.append(Needle(text.strip(), f"tests/{rel}"))
            out.extend(Needle(line.strip(), f"tests/{rel}") for line in text.splitlines())
            continue
        for rx in _CMP_RE:
            for m in rx.finditer(text):
                value = m.group("dq") or m.group("sq") or m.group("num") or ""
                if value and not _looks_like_path(value):
                    out.append(Needle(value, f"tests/{rel}"))
    return _dedupe(out)


def oracle_outputs(before: Path, after: Path) -> list[Needle]:
    """What the oracle created or changed: small new files whole, and every added line."""
    out: list[Needle] = []
    for path in sorted(p for p in after.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(after).as_posix()
        if rel.startswith(".git/") or "/.git/" in rel:
            continue
        new = _read_text(path, limit=64 << 10)
        if new is None:
            continue
        old_path = before / rel
        old = _read_text(old_path, limit=64 << 10) if old_path.is_file() else None
        if old == new:
            continue
        if old is None and len(new) <= 2048 and new.strip():
            out.append(Needle(new.strip(), f"oracle:/app/{rel}"))
        old_lines = set((old or "").splitlines())
        out.extend(
            Needle(line.strip(), f"oracle:/app/{rel}")
            for line in new.splitlines()
            if line not in old_lines
        )
    return _dedupe(out)


def drop_spec(needles: Iterable[Needle], *spec_texts: str) -> list[Needle]:
    """Drop trivial needles and those the solution or instruction states as the spec."""
    spec = [normalize(t) for t in spec_texts if t]
    return [n for n in needles if not is_trivial(n.text) and not any(n.norm in s for s in spec)]


def _dedupe(needles: list[Needle]) -> list[Needle]:
    seen: set[str] = set()
    out = []
    for n in needles:
        if n.norm and n.norm not in seen:
            seen.add(n.norm)
            out.append(n)
    return out


def _looks_like_path(value: str) -> bool:
    return value.startswith(("/", "./", "~")) or (
        "/" in value and " " not in value and not value.replace("/", "").isdigit()
    )


# --- matching ------------------------------------------------------------------------------
def _token_re(text: str) -> re.Pattern[str]:
    return re.compile(r"(?<![\w.])" + re.escape(text) + r"(?![\w])")


def match(needle: Needle, text: str, *, labelled_only: bool = False) -> tuple[str, float, str]:
    """``(kind, similarity, context)`` of the best match of ``needle`` in ``text``, or
    ``("", 0, "")``. With ``labelled_only``, only a match on a line that labels it counts."""
    for kind, hay, ndl in (("exact", text, needle.text), ("normalized", None, needle.norm)):
        if hay is None:
            hay = normalize(text)
        for m in _token_re(ndl).finditer(hay):
            line = _line_at(hay, m.start())
            if labelled_only and not LABEL_RE.search(line.replace(ndl, " ")):
                continue
            return kind, 1.0, line[:200]
    if not labelled_only and len(needle.norm) >= FUZZY_MIN_CHARS:
        sim = containment(needle.norm, normalize(text))
        if sim >= FUZZY_THRESHOLD:
            return "fuzzy", round(sim, 3), ""
    return "", 0.0, ""


def containment(needle: str, hay: str, n: int = 5) -> float:
    """Share of the needle's character n-grams found in ``hay``."""
    grams = {needle[i : i + n] for i in range(max(1, len(needle) - n + 1))}
    if not grams:
        return 0.0
    hay_grams = {hay[i : i + n] for i in range(max(1, len(hay) - n + 1))}
    return len(grams & hay_grams) / len(grams)


def _line_at(text: str, pos: int) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start : end if end != -1 else len(text)].strip()


def scan_text(
    needles: Iterable[Needle], text: str, where: str, *, labelled_only: bool = False
) -> list[Hit]:
    hits = []
    for n in needles:
        kind, sim, ctx = match(n, text, labelled_only=labelled_only)
        if kind:
            hits.append(Hit(n.text[:200], n.source, where, kind, sim, ctx, full_needle=n.text))
    return hits


# --- surfaces ------------------------------------------------------------------------------
def _read_text(path: Path, limit: int = MAX_FILE_BYTES) -> str | None:
    try:
        if path.stat().st_size > limit:
            return None
        data = path.read_bytes()
    except OSError:
        return None
    if b"\0" in data[:8192]:
        return None
    return data.decode("utf-8", errors="replace")


def _archive_members(path: Path) -> Iterator[tuple[str, str]]:
    """``(member name, text)`` of the text members of a tar or zip archive."""
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                for info in z.infolist()[:10_000]:
                    if not info.is_dir() and info.file_size <= MAX_FILE_BYTES:
                        data = z.read(info)
                        if b"\0" not in data[:8192]:
                            yield info.filename, data.decode("utf-8", errors="replace")
        elif tarfile.is_tarfile(path):
            with tarfile.open(path) as t:
                for member in t.getmembers()[:10_000]:
                    if member.isfile() and member.size <= MAX_FILE_BYTES:
                        f = t.extractfile(member)
                        data = f.read() if f else b""
                        if b"\0" not in data[:8192]:
                            yield member.name, data.decode("utf-8", errors="replace")
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError):
        return


def git_objects(git_dir: Path) -> Iterator[tuple[str, str]]:
    """``(object id, text)`` of every blob and commit in ``git_dir``, unreachable ones too."""
    try:
        proc = subprocess.run(
            ["git", f"--git-dir={git_dir}", "cat-file", "--batch-all-objects", "--batch"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return
    data, pos = proc.stdout, 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        if end == -1:
            break
        header = data[pos:end].split()
        if len(header) != 3:
            break
        oid, kind, size = header[0].decode(), header[1].decode(), int(header[2])
        body = data[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
        if kind in ("blob", "commit", "tag") and b"\0" not in body[:8192]:
            yield oid, body.decode("utf-8", errors="replace")


_BASE64_RE = re.compile(r"[A-Za-z0-9+/=\s]{16,}")


def _base64_text(text: str) -> str | None:
    """The text a file holds base64-encoded (the whole file is base64 of UTF-8 text), if so."""
    body = text.strip()
    if len(body) > MAX_FILE_BYTES or not _BASE64_RE.fullmatch(body):
        return None
    try:
        data = base64.b64decode("".join(body.split()), validate=True)
        return data.decode("utf-8") if b"\0" not in data else None
    except (binascii.Error, ValueError):
        return None


def declared_inputs(root: Path, *texts: str) -> set[str]:
    """Workspace files (relative paths) the instruction or solution names: the task's inputs."""
    names = set()
    joined = "\n".join(texts)
    for path in root.rglob("*"):
        if path.is_file():
            rel = path.relative_to(root).as_posix()
            if rel.startswith(".git/") or "/.git/" in rel:
                continue
            if rel in joined or re.search(r"(?<![\w.])" + re.escape(path.name) + r"\b", joined):
                names.add(rel)
    return names


def scan_workspace(root: Path, needles: list[Needle], declared: set[str]) -> list[Hit]:
    """Every file under ``root`` (hidden ones too), archives' members, and git objects."""
    hits: list[Hit] = []
    if not needles:
        return hits
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        parts = rel.split("/")
        if ".git" in parts[:-1]:
            continue
        where = f"/app/{rel}"
        text = _read_text(path)
        if text is not None:
            hits += scan_text(needles, text, where, labelled_only=rel in declared)
            decoded = _base64_text(text)
            if decoded is not None:
                hits += scan_text(needles, decoded, f"{where} (base64-decoded)")
        else:
            for member, mtext in _archive_members(path):
                hits += scan_text(needles, mtext, f"{where}!{member}")
    for git_dir in sorted(p for p in root.rglob(".git") if p.is_dir()):
        rel = git_dir.relative_to(root).as_posix()
        for oid, text in git_objects(git_dir):
            hits += scan_text(needles, text, f"/app/{rel} object {oid[:12]}")
    return hits


def scan_env(needles: list[Needle], env: dict[str, str]) -> list[Hit]:
    hits: list[Hit] = []
    for key, value in sorted(env.items()):
        hits += scan_text(needles, value, f"env:{key}")
    return hits


def scan_instruction(needles: list[Needle], instruction: str, input_texts: list[str]) -> list[Hit]:
    """An instruction may spell out the output's format (a CSV header the oracle also writes):
    oracle-output needles count there only on a labelling line; the tests' expected values
    count anywhere. Neither counts when the task's inputs contain it too."""
    inputs = normalize("\n".join(input_texts))
    graded = [n for n in needles if not n.source.startswith("oracle:")]
    produced = [n for n in needles if n.source.startswith("oracle:")]
    hits = scan_text(graded, instruction, "instruction.md") + scan_text(
        produced, instruction, "instruction.md", labelled_only=True
    )
    return [h for h in hits if not _token_re(normalize(h.needle)).search(inputs)]


# --- where a hit is: the task's material, or a leak ------------------------------------------
def named_material(root: Path, instruction: str) -> set[str]:
    """``/app/...`` paths of what the instruction names as the task's material: the files it
    names, and the directories it names (with everything under them, git objects too)."""
    material = {f"/app/{rel}" for rel in declared_inputs(root, instruction)}
    for path in root.rglob("*"):
        if not path.is_dir() or ".git" in path.relative_to(root).parts:
            continue
        rel = path.relative_to(root).as_posix()
        if re.search(r"(?:/app/|`)" + re.escape(rel) + r"/?(?![\w.-])", instruction):
            material.add(f"/app/{rel}")
    return material


def hit_path(where: str) -> str | None:
    """The workspace path of a hit (an archive's or a git directory's path for their members and
    objects); ``None`` for the instruction and environment variables."""
    if not where.startswith("/app/"):
        return None
    return re.split(r"!| object | \(base64-decoded\)", where, maxsplit=1)[0]


def in_material(where: str, material: set[str]) -> bool:
    path = hit_path(where)
    return path is not None and any(path == m or path.startswith(m + "/") for m in material)


def split_hits(hits: list[Hit], material: set[str]) -> tuple[list[Hit], list[Hit]]:
    """``(candidates, in_material)``: hits outside the material the instruction names (hidden
    files, git history, environment variables, the instruction itself) are leak candidates,
    confirmed when copying the answer to where the oracle writes passes; hits inside it (an
    archive to extract, a file to decode) are warnings."""
    inside = [h for h in hits if in_material(h.where, material)]
    return [h for h in hits if h not in inside], inside
