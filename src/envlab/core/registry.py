"""Find plug-ins by name: an entry-point group, or a ``module:attribute`` path."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType
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
        names = self.names()
        known = ", ".join(n for n in names if not n.endswith(":*")) or "(none installed)"
        families = [n for n in names if n.endswith(":*")]
        if families:
            known += f"; families, each name one of its items: {', '.join(families)}"
        raise NotFoundError(
            f"unknown {self.kind} {name!r}. Known {self.kind}s: {known}. "
            f"Or give an import path such as 'mypkg.mymodule:make_{self.kind}'."
        )


def import_path(path: str, kind: str) -> Any:
    """``module.sub:attribute`` (a module installed or in the working directory) or
    ``file.py:attribute`` (a Python file, relative to the working directory)."""
    module_name, _, attr = path.partition(":")
    if module_name.endswith(".py"):
        module = _import_file(Path(module_name), path, kind)
    else:
        module = _import_module(module_name, path, kind)
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise NotFoundError(
                f"module {module_name!r} has no attribute {attr!r} (from {kind} {path!r})"
            ) from None
    return obj


def _import_module(module_name: str, path: str, kind: str) -> ModuleType:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # as `python -m` would: the project here
        sys.path.append(cwd)
    try:
        return importlib.import_module(module_name)
    except ImportError as e:
        raise NotFoundError(
            f"cannot import module {module_name!r} for {kind} {path!r}: {e}. Check that the "
            "package is installed or in the current directory, and that the path is "
            "'module.sub:attribute' (or 'file.py:attribute')."
        ) from e


def _import_file(file: Path, path: str, kind: str) -> ModuleType:
    if not file.is_file():
        raise NotFoundError(f"no file {str(file)!r} for {kind} {path!r} (from {os.getcwd()})")
    where = file.resolve()
    name = file.stem
    known = sys.modules.get(name)
    if known is not None:
        if Path(getattr(known, "__file__", "") or "").resolve() == where:
            return known
        raise NotFoundError(
            f"{str(file)!r} (for {kind} {path!r}) has the name of the module {name!r} that is "
            f"already imported from {getattr(known, '__file__', None) or 'built-ins'}; rename "
            "the file"
        )
    spec = importlib.util.spec_from_file_location(name, where)
    if spec is None or spec.loader is None:
        raise NotFoundError(f"cannot load {str(file)!r} as Python for {kind} {path!r}")
    folder = str(where.parent)
    if folder not in sys.path:  # the file may import its neighbours, as `python file.py` can
        sys.path.append(folder)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # so that its classes' source can be found (content hashes)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise NotFoundError(
            f"{str(file)!r} (for {kind} {path!r}) failed to import: {type(e).__name__}: {e}"
        ) from e
    return module
