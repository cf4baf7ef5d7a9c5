"""A domain's database on SQLite: records as JSON documents keyed by id, one fresh copy per episode.

Each table is ``(id TEXT PRIMARY KEY, doc TEXT, by_<field> ...)``; ``doc`` is the record as JSON,
in the key order of the data (tools return records as ``json.dumps`` of them, so the order is
part of what the agent sees), with every JSON type kept (``1490`` and ``1490.0`` and ``true`` come
back as they went in: τ-bench's grade tells them apart, ``envs/tau/identity.py``). The fields a
domain looks records up by are copied into indexed ``by_<field>`` columns when they are strings
(SQLite's JSON functions are not used on records: they refuse the ``NaN`` an agent may send). The
pristine database is built once per process from the packaged data and kept as bytes
(``Connection.serialize``); an episode's copy is a ``deserialize`` of them: a memory copy, well
under a millisecond for a few megabytes (``bench/tau.py``). Every insert, update and delete is
logged by triggers, so ``changes()`` (the records that differ from the pristine ones) costs what
the episode wrote, not the database's size.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from envlab.core import ConfigError
from envlab.envs.tau.identity import hash_text

Record = dict[str, Any]
Changes = dict[str, dict[str, Record | None]]
"""table -> id -> the record now, or ``None`` when it was removed (τ-bench's ``gold_diff``)."""


@dataclass(frozen=True)
class Schema:
    """The tables of a domain and the fields to look records up by (``{"users": ["email",
    "address.zip"]}``: a dotted path into the record)."""

    tables: Sequence[str]
    indexes: Mapping[str, Sequence[str]] = field(default_factory=dict)


def data_file(domain: str, name: str) -> bytes:
    """A packaged data file of ``domain`` (``tools.json``; a ``.gz`` beside it is read too)."""
    root = resources.files("envlab.envs.tau") / "data" / domain
    plain, packed = root / name, root / f"{name}.gz"
    if packed.is_file():
        return gzip.decompress(packed.read_bytes())
    if plain.is_file():
        return plain.read_bytes()
    raise ConfigError(f"no data file {name!r} for the τ domain {domain!r} in the envlab package")


def load_json(domain: str, name: str) -> Any:
    return json.loads(data_file(domain, name))


def _create(conn: sqlite3.Connection, schema: Schema) -> None:
    conn.execute(
        "CREATE TABLE _changes (tbl TEXT NOT NULL, id TEXT NOT NULL, PRIMARY KEY (tbl, id))"
    )
    for table in schema.tables:
        keys = "".join(f', "{_column(k)}" TEXT' for k in schema.indexes.get(table, ()))
        conn.execute(f'CREATE TABLE "{table}" (id TEXT PRIMARY KEY, doc TEXT NOT NULL{keys})')
        for op, row in (("INSERT", "NEW"), ("UPDATE", "NEW"), ("DELETE", "OLD")):
            conn.execute(
                f'CREATE TRIGGER "{table}_{op.lower()}" AFTER {op} ON "{table}" BEGIN '
                f"INSERT INTO _changes VALUES ('{table}', {row}.id) ON CONFLICT DO NOTHING; END"
            )
        for key in schema.indexes.get(table, ()):
            conn.execute(f'CREATE INDEX "{table}_{key}" ON "{table}" ("{_column(key)}")')


def _column(field: str) -> str:
    return "by_" + field.replace(".", "_")


def _field(record: Record, field: str) -> str | None:
    """The string at the dotted path ``field`` of ``record``; None where there is none."""
    node: Any = record
    for step in field.split("."):
        if not isinstance(node, dict) or step not in node:
            return None
        node = node[step]
    return node if isinstance(node, str) else None


def _row(schema: Schema, table: str, key: str, record: Record) -> tuple[Any, ...]:
    fields = schema.indexes.get(table, ())
    return (key, json.dumps(record), *(_field(record, f) for f in fields))


def _insert(schema: Schema, table: str) -> str:
    """An upsert of one row of ``table`` (id, doc and the lookup columns)."""
    columns = ["id", "doc", *(_column(f) for f in schema.indexes.get(table, ()))]
    names = ", ".join(f'"{c}"' for c in columns)
    update = ", ".join(f'"{c}" = excluded."{c}"' for c in columns[1:])
    marks = ", ".join("?" * len(columns))
    return (
        f'INSERT INTO "{table}" ({names}) VALUES ({marks}) ON CONFLICT (id) DO UPDATE SET {update}'
    )


_pristine: dict[str, bytes] = {}
_lock = threading.Lock()


def pristine(domain: str, schema: Schema) -> bytes:
    """The serialized pristine database of ``domain``, built once per process from its data."""
    with _lock:
        image = _pristine.get(domain)
        if image is None:
            conn = sqlite3.connect(":memory:")
            _create(conn, schema)
            for table in schema.tables:
                records = load_json(domain, f"db/{table}.json")
                conn.executemany(
                    _insert(schema, table),
                    (_row(schema, table, key, rec) for key, rec in records.items()),
                )
            conn.execute("DELETE FROM _changes")
            conn.commit()
            image = _pristine[domain] = conn.serialize()
            conn.close()
        return image


class Database:
    """One episode's own copy of a domain's database."""

    def __init__(self, domain: str, schema: Schema) -> None:
        self.domain, self.schema = domain, schema
        self._image = pristine(domain, schema)
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.deserialize(self._image)
        self.writes = 0
        """Records written so far (inserts, updates, deletes)."""

    def get(self, table: str, key: Any) -> Record | None:
        """The record ``key`` of ``table``, None if there is none. ``key`` is what the agent sent,
        looked up as τ-bench looks it up in a dict of records: a key that is not a string is in
        no table (no number matches the id "123"), an unhashable one raises ``TypeError``."""
        if not isinstance(key, str):
            hash(key)  # TypeError: unhashable type: 'list', as `key in records` raises
            return None
        row = self.conn.execute(f'SELECT doc FROM "{table}" WHERE id = ?', (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put(self, table: str, key: str, record: Record) -> None:
        """Insert or replace the record ``key`` of ``table``."""
        self.conn.execute(_insert(self.schema, table), _row(self.schema, table, key, record))
        self.writes += 1

    def delete(self, table: str, key: str) -> None:
        self.conn.execute(f'DELETE FROM "{table}" WHERE id = ?', (key,))
        self.writes += 1

    def where(self, table: str, **equal: str) -> list[tuple[str, Record]]:
        """The records of ``table`` whose lookup fields (``Schema.indexes``; ``address_zip``
        for ``address.zip``) hold the strings ``equal``, in the data's order."""
        known = {_column(f): f for f in self.schema.indexes.get(table, ())}
        columns = [f"by_{name}" for name in equal]
        if not set(columns) <= set(known) or not all(isinstance(v, str) for v in equal.values()):
            raise ValueError(f"{table} is looked up by the strings of {sorted(known.values())}")
        test = " AND ".join(f'"{c}" = ?' for c in columns)
        sql = f'SELECT id, doc FROM "{table}" WHERE {test} ORDER BY rowid'
        return [(key, json.loads(doc)) for key, doc in self.conn.execute(sql, (*equal.values(),))]

    def ids(self, table: str) -> list[str]:
        """Every id of ``table``, in the data's order."""
        return [row[0] for row in self.conn.execute(f'SELECT id FROM "{table}" ORDER BY rowid')]

    def items(self, table: str) -> Iterator[tuple[str, Record]]:
        for key, doc in self.conn.execute(f'SELECT id, doc FROM "{table}" ORDER BY rowid'):
            yield key, json.loads(doc)

    def changes(self) -> Changes:
        """The records that differ from the pristine database: table -> id -> record now (or
        ``None`` if removed), different as τ-bench's hash tells records apart (types count, key
        order does not). A record written back to its first value is not a change."""
        logged = self.conn.execute("SELECT tbl, id FROM _changes ORDER BY tbl, id").fetchall()
        if not logged:
            return {}
        before = sqlite3.connect(":memory:")
        before.deserialize(self._image)
        out: Changes = {}
        try:
            for table, key in logged:
                now = self.get(table, key)
                row = before.execute(f'SELECT doc FROM "{table}" WHERE id = ?', (key,)).fetchone()
                if hash_text(now) != hash_text(None if row is None else json.loads(row[0])):
                    out.setdefault(table, {})[key] = now
        finally:
            before.close()
        return out

    def close(self) -> None:
        self.conn.close()
