"""Writing exported rows: JSON Lines (streamed, one row a line) or Parquet (pyarrow, lazily).

The file is written next to its final name and moved into place when complete, so a failed
export never leaves a half-written file a trainer could read as whole.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

from envlab.core import ConfigError, StoreError

FileKind = Literal["jsonl", "parquet"]


def file_kind(path: Path) -> FileKind:
    """``parquet`` for ``*.parquet``, ``jsonl`` for ``*.jsonl``/``*.json``, else ``ConfigError``."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        return "parquet"
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    raise ConfigError(
        f"--out {path}: the export format is chosen by the file's suffix; "
        "end it with .jsonl (JSON Lines) or .parquet (Parquet, needs pyarrow)"
    )


class RowWriter:
    """``with RowWriter(path) as w: w.write(row)``; the file appears only when all went well."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.kind = file_kind(self.path)
        self.n_rows = 0
        self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        self._rows: list[dict[str, Any]] = []
        self._fh: Any = None

    def __enter__(self) -> RowWriter:
        if self.kind == "parquet":
            _require_pyarrow()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.kind == "jsonl":
                self._fh = self._tmp.open("w", encoding="utf-8")
        except OSError as e:
            raise StoreError(f"cannot write {self.path}: {e.strerror or e}") from e
        return self

    def write(self, row: dict[str, Any]) -> None:
        self.n_rows += 1
        if self._fh is not None:
            self._fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        else:
            self._rows.append(row)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fh is not None:
            self._fh.close()
        try:
            if exc_type is None:
                if self.kind == "parquet":
                    _write_parquet(self._tmp, self._rows)
                os.replace(self._tmp, self.path)
        except OSError as e:
            raise StoreError(f"cannot write {self.path}: {e.strerror or e}") from e
        finally:
            self._tmp.unlink(missing_ok=True)


def _require_pyarrow() -> None:
    import importlib.util

    if importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(
            "a .parquet export needs pyarrow, which is not installed: pip install 'envlab[train]' "
            "(or write .jsonl)"
        )


def _write_parquet(path: Path, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
