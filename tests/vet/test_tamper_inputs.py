"""The input rewriter the ``tampered_inputs_*`` probes run in the sandbox, on real files."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from envlab.vet import tamper_inputs


def test_text_csv_and_json_keep_half_their_records(tmp_path: Path) -> None:
    csv = tmp_path / "sales.csv"
    csv.write_text("region,units\nA,1\nB,2\nC,3\nD,4\n")
    log = tmp_path / "api.log"
    log.write_text("one\ntwo\nthree\n")
    js = tmp_path / "users.json"
    js.write_text(json.dumps({"users": [1, 2, 3, 4], "name": "x"}))
    for p in (csv, log, js):
        assert tamper_inputs.tamper_file(str(p), "last")
    assert csv.read_text() == "region,units\nC,3\nD,4\n"
    assert log.read_text() == "two\nthree\n"
    assert json.loads(js.read_text()) == {"users": [3, 4], "name": "x"}


def test_sqlite_halves_its_largest_table_only(tmp_path: Path) -> None:
    db_path = tmp_path / "shop.db"
    db = sqlite3.connect(db_path)
    db.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER)")
    db.executemany("INSERT INTO customers VALUES (?, ?)", [(1, "a"), (2, "b")])
    db.executemany("INSERT INTO orders VALUES (?, ?)", [(i, i % 2 + 1) for i in range(1, 11)])
    db.commit()
    db.close()
    assert tamper_inputs.tamper_file(str(db_path), "first")
    db = sqlite3.connect(db_path)
    assert db.execute("SELECT COUNT(*) FROM customers").fetchone() == (2,)
    assert [r[0] for r in db.execute("SELECT id FROM orders")] == [1, 2, 3, 4, 5]
    db.close()


def test_code_and_binary_files_are_left_alone(tmp_path: Path) -> None:
    code = tmp_path / "main.py"
    code.write_text("a = 1\nb = 2\n")
    blob = tmp_path / "data.bin"
    blob.write_bytes(b"\x00\x01\x02")
    assert not tamper_inputs.tamper_file(str(code), "first")
    assert not tamper_inputs.tamper_file(str(blob), "first")
    assert code.read_text() == "a = 1\nb = 2\n"


def test_runs_as_a_standalone_script(tmp_path: Path) -> None:
    """The probe copies the file into the sandbox: it must need nothing but the stdlib."""
    data = tmp_path / "data.txt"
    data.write_text("1\n2\n3\n4\n")
    out = subprocess.run(
        [sys.executable, "-I", tamper_inputs.__file__, "first", str(data)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"ENVLAB-PROBE-TAMPERED {data}"
    assert data.read_text() == "1\n2\n"
