"""Rewrite a task's input files in place: ``python3 tamper_inputs.py MODE PATH...``.

Standard library only: the ``tampered_inputs_*`` probes copy this file into the agent's sandbox
and run it there before the reference solution. ``MODE`` is ``first`` or ``last`` (keep that
half of the records) or ``empty`` (keep none). Records are the lines of a text file (a CSV or
TSV keeps its header), the items of a JSON list (or of every list at the top of a JSON object),
the rows of an SQLite database's largest table (``empty``: of every table). Code and other
binary files are left alone. Prints one line per file it changed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys

CODE_SUFFIXES = (".py", ".sh", ".bash", ".js", ".ts", ".go", ".rs", ".c", ".h", ".cpp", ".java")
HEADED_SUFFIXES = (".csv", ".tsv")
SQLITE_MAGIC = b"SQLite format 3\x00"


def keep(items: list, mode: str) -> list:
    if mode == "empty":
        return []
    if len(items) < 2:
        return items
    return items[: len(items) // 2] if mode == "first" else items[len(items) // 2 :]


def tamper_text(text: str, path: str, mode: str) -> str:
    lines = text.splitlines(keepends=True)
    head = lines[:1] if path.endswith(HEADED_SUFFIXES) else []
    return "".join(head + keep(lines[len(head) :], mode))


def tamper_json(data: object, mode: str) -> object:
    if isinstance(data, list):
        return keep(data, mode)
    if isinstance(data, dict):
        lists = {k: v for k, v in data.items() if isinstance(v, list)}
        if lists:
            return {k: keep(v, mode) if k in lists else v for k, v in data.items()}
        return dict(keep(list(data.items()), mode))
    return data


def tamper_sqlite(path: str, mode: str) -> None:
    db = sqlite3.connect(path)
    try:
        names = [
            r[0]
            for r in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        counts = {n: db.execute(f'SELECT COUNT(*) FROM "{n}"').fetchone()[0] for n in names}
        largest = max(counts.values(), default=0)
        for name, n in counts.items():
            if mode == "empty":
                db.execute(f'DELETE FROM "{name}"')
            elif n == largest and n >= 2:
                k = n // 2
                limit, offset = (k, 0) if mode == "first" else (n - k, k)
                db.execute(
                    f'DELETE FROM "{name}" WHERE rowid NOT IN '
                    f'(SELECT rowid FROM "{name}" ORDER BY rowid LIMIT {limit} OFFSET {offset})'
                )
        db.commit()
    finally:
        db.close()


def tamper_file(path: str, mode: str) -> bool:
    """Rewrite one input; whether it changed."""
    if path.endswith(CODE_SUFFIXES) or not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(SQLITE_MAGIC):
        try:
            tamper_sqlite(path, mode)
        except sqlite3.Error:
            return False
    else:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            return False
        if "\0" in text:
            return False
        try:
            new = json.dumps(tamper_json(json.loads(text), mode), indent=2) + "\n"
        except ValueError:
            new = tamper_text(text, path, mode)
        with open(path, "w") as f:
            f.write(new)
    with open(path, "rb") as f:
        return f.read() != data


def main(argv: list[str]) -> int:
    mode, paths = argv[0], argv[1:]
    for path in paths:
        if tamper_file(path, mode):
            print(f"ENVLAB-PROBE-TAMPERED {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
