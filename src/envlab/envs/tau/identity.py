"""What τ-bench's grade tells apart: two databases are the same when their hash texts are.

τ-bench grades a conversation by hashing its whole database (``tau_bench/envs/base.py``:
``get_data_hash`` is the sha256 of ``str(to_hashable(data))``) and comparing the hash with the
gold database's. In that text a dict is its (key, value) pairs in key order, a list is a tuple,
and every other value is written by ``repr``. So:

- types count: ``1490.0``, ``1490`` and ``True`` are three values (Python's ``==`` says two),
  and so do signs: ``0.0`` and ``-0.0`` differ;
- the order of a dict's keys does not count, the order of a list does;
- as in τ-bench, an empty dict and an empty list are the same value, and so are a dict and the
  list of its ``[key, value]`` pairs.

``hash_text`` writes that text for one record (or any JSON value); comparing the texts of the
records that changed is comparing τ-bench's hashes of the whole databases, without hashing the
records that did not change.
"""

from __future__ import annotations

from typing import Any


def hash_text(value: Any) -> str:
    """The text τ-bench hashes for ``value``: equal texts, equal values for its grade. (Every
    value τ-bench hashes is inside a tuple, so written by ``repr``: ``"1"`` is not ``1``.)"""
    return repr(_hashable(value))


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((key, _hashable(value[key])) for key in sorted(value))
    if isinstance(value, list):
        return tuple(_hashable(item) for item in value)
    return value


def same_data(a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> bool:
    """Whether two sets of changed records (table -> id -> record) are the same for τ-bench's
    hash (a table with no record is no change)."""
    return hash_text({t: r for t, r in a.items() if r}) == hash_text(
        {t: r for t, r in b.items() if r}
    )
