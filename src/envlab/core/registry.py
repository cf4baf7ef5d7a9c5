"""Find plug-ins by name: an entry-point group, or a ``module:attribute`` path."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from envlab.core.errors import NotFoundError


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    target: str
    source: str


class Registry:
    """Named factories from the entry-point group ``group`` plus ones registered in code."""

    def __init__(self, group: str, kind: str) -> None:
        self.group = group
        self.kind = kind
        self._local: dict[str, Any] = {}

    def register(self, name: str, factory: Any) -> None:
        self._local[name] = factory

    def entries(self) -> list[Entry]:
        found = {
            ep.name: Entry(ep.name, ep.value, ep.dist.name if ep.dist else "?")
            for ep in entry_points(group=self.group)
        }
        for name, f in self._local.items():
            found[name] = Entry(name, f"{f.__module__}:{f.__qualname__}", "registered in code")
        return sorted(found.values(), key=lambda e: e.name)

    def names(self) -> list[str]:
        return [e.name for e in self.entries()]

    def resolve(self, name: str) -> Any:
        """The factory called ``name``, or at the import path ``package.module:attribute``."""
        if name in self._local:
            return self._local[name]
        for ep in entry_points(group=self.group, name=name):
            try:
                return ep.load()
            except Exception as e:
                dist = ep.dist.name if ep.dist else "its package"
                raise NotFoundError(
                    f"{self.kind} {name!r} ({ep.value}, from {dist}) failed to import: "
                    f"{type(e).__name__}: {e}. Reinstall it (pip install --force-reinstall "
                    f"{dist}) or install what it needs."
                ) from e
        if ":" in name:
            return import_path(name, self.kind)
        known = ", ".join(self.names()) or "(none installed)"
        raise NotFoundError(
            f"unknown {self.kind} {name!r}. Known {self.kind}s: {known}. "
            f"Or give an import path such as 'mypkg.mymodule:make_{self.kind}'."
        )


def import_path(path: str, kind: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise NotFoundError(
            f"cannot import module {module_name!r} for {kind} {path!r}: {e}. "
            "Check that the package is installed and the path is 'module.sub:attribute'."
        ) from e
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFoundError(
                f"module {module_name!r} has no attribute {attr!r} (from {kind} {path!r})"
            ) from None
    return obj
