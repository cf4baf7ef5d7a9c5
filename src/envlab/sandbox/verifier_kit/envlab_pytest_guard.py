"""envlab's pytest guard in the verifier (``PYTEST_PLUGINS`` in an image; registered by
``run_pytest.py`` in the host mode). Python 3.6+, standard library only.

It reports the start and the end of every test session on envlab's events channel (a FIFO the
host reads while the tests run, bind-mounted so that it cannot be replaced: what was written
cannot be erased), so that a session the code under test cut short (``os._exit`` at import, a
kill) is known to have never finished, whatever exit code it left behind.

It also keeps the test run honest when the tests import the code under test into pytest's own
process (``from solution import f``), where that code could make failing tests pass. Right
before the first conftest loads (no task code has run yet) it snapshots pytest's code (every
function, class, descriptor and code object of ``pytest``, ``_pytest``, ``pluggy``; the
builtins pytest counts outcomes with) and the plugin manager (hook callers, every hook
implementation and its code); after collection, the tests' own functions and items. After
collection, after each test (the modules an outcome goes through) and at the end it compares:
anything replaced, removed or added; a hook implementation registered since whose code is not
pytest's, pluggy's, the Python installation's or in a directory of the tests' own; failed
reports or collected tests that never ran while the session exits 0: each taints the session.
A tainted session writes ``tainted PID WHAT`` on the channel, never reports itself finished
(the grade is invalid: scored 0), exits 3 and says ``grader_tainted`` on stderr.

What it cannot do: code written against this guard (it runs in the same process) can still
defeat it; tests that must not trust the code under test run it in a subprocess.
"""

# ruff: noqa: UP006, UP035, UP045 (the image's Python may be 3.6: annotations are evaluated)
import builtins
import contextlib
import os
import site
import sys
import sysconfig
import types
from typing import Any, Dict, FrozenSet, List, Optional, Set, Tuple

_EVENTS = os.environ.get("ENVLAB_EVENTS", "/logs/.envlab-events")
# kept before any code under test runs: the guard does not use what it checks
_id, _callable, _isinstance, _getattr, _hasattr, _vars, _sorted = (
    id, callable, isinstance, getattr, hasattr, vars, sorted,
)  # fmt: skip
_realpath, _dirname, _open, _write, _close, _getpid = (
    os.path.realpath, os.path.dirname, os.open, os.write, os.close, os.getpid,
)  # fmt: skip
_MODULES = ("pytest", "_pytest", "pluggy", "py")
"""Top-level names whose modules (and submodules) are pytest's own code."""
_BUILTINS = (
    "hasattr", "getattr", "setattr", "isinstance", "issubclass", "len", "bool", "any", "all",
    "callable", "id", "iter", "next", "sorted", "type", "object", "super", "str", "repr", "int",
    "__import__", "__build_class__", "BaseException", "Exception", "AssertionError",
    "KeyboardInterrupt",
)  # fmt: skip
"""The builtins pytest decides outcomes with (raising and counting failures)."""
_HOT = {
    "pytest", "_pytest.runner", "_pytest.reports", "_pytest.python", "_pytest.main",
    "_pytest.outcomes", "_pytest.skipping", "_pytest.nodes", "_pytest.python_api",
    "_pytest.raises", "_pytest.unittest", "_pytest.terminal", "_pytest.junitxml",
    "pluggy._callers", "pluggy._hooks", "pluggy._result", "pluggy._manager",
}  # fmt: skip
"""The modules a test's outcome goes through: checked after every test (the others after
collection and at the end)."""
_VOLATILE = {
    "_pytest.assertion.util:_reprcompare", "_pytest.assertion.util:_assertion_pass",
    "_pytest.assertion.util:_config",
    # legacypath sets these (anew) at every session's start: a pytester session's too
    "_pytest.cacheprovider:Cache.makedir", "_pytest.fixtures:FixtureRequest.fspath",
    "_pytest.terminal:TerminalReporter.startdir", "_pytest.config:Config.invocation_dir",
    "_pytest.config:Config.rootdir", "_pytest.config:Config.inifile",
    "_pytest.config:Config._getini_unknown_type", "_pytest.main:Session.startdir",
    "_pytest.nodes:Node.fspath",
}  # fmt: skip
"""Attributes pytest itself sets while tests run."""
_DESCRIPTORS = (staticmethod, classmethod, property)
_MAX_PROBLEMS = 8


def report(line: str) -> None:
    """Write one line on the events channel (never blocks; a missing channel is ignored)."""
    try:
        fd = _open(_EVENTS, os.O_WRONLY | os.O_NONBLOCK | os.O_APPEND)
    except OSError:
        return
    with contextlib.suppress(OSError):
        _write(fd, (line + "\n").encode())
    _close(fd)


# --- what is watched ------------------------------------------------------------------------
_MISSING = object()
Probe = Tuple[str, Any, str, Any]


def _is_code(value: Any) -> bool:
    return _callable(value) or _isinstance(value, (*_DESCRIPTORS, types.ModuleType))


def _same(a: Any, b: Any) -> bool:
    """The same object; a bound method: of the same object and function (one is made anew each
    time it is looked up)."""
    if a is b:
        return True
    if not (_isinstance(a, types.MethodType) and _isinstance(b, types.MethodType)):
        return False
    return a.__self__ is b.__self__ and a.__func__ is b.__func__


def _functions(value: Any) -> List[Any]:
    """The Python functions ``value`` runs: itself, a method's, a descriptor's."""
    if _isinstance(value, (staticmethod, classmethod, types.MethodType)):
        value = value.__func__
    if _isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if f is not None]
    return [value] if _isinstance(value, types.FunctionType) else []


class Watch:
    """Things that must stay as they were: ``keys`` (an entry of a namespace: a module's, a
    class's), ``attrs`` (an attribute: a function's code, a hook implementation's function),
    ``spaces`` (a namespace gains no new code: it would shadow what it inherits, or a builtin).
    Checking is a few identity tests per thing, cheap enough to run after every test."""

    def __init__(self) -> None:
        self.keys: List[Probe] = []
        self.attrs: List[Probe] = []
        self.spaces: List[Tuple[str, Any, int, FrozenSet[str]]] = []

    def key(self, label: str, mapping: Any, key: str) -> None:
        value = mapping.get(key, _MISSING)
        self.keys.append((label, mapping, key, value))
        self.code(label, value)

    def attr(self, label: str, obj: Any, name: str) -> None:
        value = _getattr(obj, name, _MISSING)
        self.attrs.append((label, obj, name, value))
        self.code(label, value)

    def code(self, label: str, value: Any) -> None:
        for fn in _functions(value):
            self.attrs.append((label + " (code)", fn, "__code__", fn.__code__))

    def space(self, label: str, mapping: Any) -> None:
        """Every code-like entry of a namespace, and that it gains none."""
        names = []
        for name, value in list(mapping.items()):
            if _is_code(value) and label + name not in _VOLATILE:
                names.append(name)
                self.key(label + name, mapping, name)
        self.spaces.append((label, mapping, len(mapping), frozenset(names)))

    def problems(self) -> List[str]:
        out = []
        for label, holder, name, value in self.keys:
            now = holder.get(name, _MISSING)
            if not _same(now, value):
                out.append(label + (" removed" if now is _MISSING else " replaced"))
        for label, holder, name, value in self.attrs:
            if not _same(_getattr(holder, name, _MISSING), value):
                out.append(label + " replaced")
        for label, mapping, size, names in self.spaces:
            if len(mapping) != size:  # something came or went: which, if code
                for name, value in list(mapping.items()):
                    new = name not in names and label + name not in _VOLATILE
                    if new and _is_code(value) and not _submodule(label, name, value):
                        out.append(label + name + " added")
        return out


def _submodule(label: str, name: str, value: Any) -> bool:
    """A package's attribute that is its submodule, as importing it sets (also where
    ``pytester`` took it out of ``sys.modules`` again)."""
    package = label[:-1] if label.endswith(":") else None
    full = _getattr(value, "__name__", None) if _isinstance(value, types.ModuleType) else None
    return package is not None and full == package + "." + name


def _own_instance(value: Any) -> bool:
    owner = str(_getattr(type(value), "__module__", "")).split(".")[0]
    return owner in _MODULES and _isinstance(_getattr(value, "__dict__", None), dict)


def _own_modules() -> List[Tuple[str, Any]]:
    mods = []
    for name, mod in list(sys.modules.items()):
        if mod is not None and (name.split(".")[0] in _MODULES or name == __name__):
            mods.append((name, mod))
    return _sorted(mods, key=lambda nm: nm[0])


def watch_code(hot: bool) -> Watch:
    """pytest's own code (``hot``: the modules a test's outcome goes through; else the others)
    and, when ``hot``, the builtins pytest counts outcomes with."""
    w = Watch()
    for name, mod in _own_modules():
        if (name in _HOT) != hot:
            continue
        w.key("sys.modules:" + name, sys.modules, name)
        w.space(name + ":", _vars(mod))
        for attr, value in list(_vars(mod).items()):
            defined = _isinstance(value, type) and _getattr(value, "__module__", None) == name
            if defined or _own_instance(value):  # pytest.mark: what is set on it is used
                w.space(name + ":" + attr + ".", _vars(value))
    if hot:
        for name in _BUILTINS:
            w.key("builtins:" + name, _vars(builtins), name)
    return w


# --- hook implementations -------------------------------------------------------------------
class _Hooks:
    """One plugin manager's hooks as they were before any task code ran, and the plugins
    registered on it since (kept: one registered and unregistered again is still seen)."""

    def __init__(self, manager: Any) -> None:
        self.manager = manager
        self.watch = w = Watch()
        w.attr("pm.hook", manager, "hook")
        for name in ("_inner_hookexec", "_hookexec"):
            w.attr("pm." + name, manager, name)
        self.early: Dict[int, Any] = {}
        for name, caller in list(_vars(manager.hook).items()):
            w.key("hook " + name, _vars(manager.hook), name)
            w.attr("hook " + name + "._hookexec", caller, "_hookexec")
            for impl in caller.get_hookimpls():
                self.early[_id(impl)] = impl
                plugin = str(_getattr(impl, "plugin_name", "?"))
                w.attr("hook " + name + " of " + plugin, impl, "function")
        self.late: List[Any] = []
        self.untrusted: List[str] = []
        self._judged: Dict[int, Tuple[Any, str]] = {}

    def problems(self, trusted: "_Trusted") -> List[str]:
        out = self.watch.problems()
        have = set()
        for name, caller in list(_vars(self.manager.hook).items()):
            for impl in caller.get_hookimpls():
                have.add(_id(impl))
                if _id(impl) not in self.early:
                    why = self._judge(impl.function, trusted)
                    if why:
                        out.append("hook " + name + " implemented in " + why)
        for i, impl in self.early.items():
            if i not in have:
                out.append("hook implementation of " + str(impl.plugin_name) + " removed")
        while self.late:  # each judged once, after collection (the tests' own dirs known)
            plugin = self.late.pop()
            self.untrusted += [
                "hook " + name + " implemented in " + w for name, w in trusted.plugin(plugin)
            ]
        return _sorted(set(out + self.untrusted))

    def _judge(self, fn: Any, trusted: "_Trusted") -> str:
        seen = self._judged.get(_id(fn))
        if seen is None or seen[0] is not fn:
            seen = self._judged[_id(fn)] = (fn, trusted.untrusted(fn))
        return seen[1]


class _Trusted:
    """Where the code of a hook implementation registered after the snapshot may live: pytest,
    pluggy, this kit, the Python installation, a directory of the tests' own."""

    def __init__(self) -> None:
        dirs = set()
        for name in ("_pytest", "pytest", "pluggy"):
            path = _getattr(sys.modules.get(name), "__file__", None)
            if path:
                dirs.add(_dirname(_realpath(path)))
        dirs.add(_dirname(_realpath(__file__)))
        paths = sysconfig.get_paths()
        places = [paths.get(n) for n in ("stdlib", "platstdlib", "purelib", "platlib")]
        with contextlib.suppress(AttributeError):  # an old virtualenv's site has none
            places += site.getsitepackages()
        self.dirs = dirs | {_realpath(p) for p in places if p}

    def add_tests(self, path: Any) -> None:
        """The directory of a file of the tests' own (a conftest, a test module)."""
        if path:
            self.dirs.add(_dirname(_realpath(str(path))))

    def untrusted(self, fn: Any) -> str:
        """Where ``fn``'s code lives, if it is no place a hook implementation may come from."""
        code = _getattr(_getattr(fn, "__func__", fn), "__code__", None)
        if code is None:
            return "a callable that is no Python function (" + type(fn).__name__ + ")"
        path = _realpath(code.co_filename)
        for d in self.dirs:
            if path.startswith(d.rstrip(os.sep) + os.sep):
                return ""
        return code.co_filename

    def plugin(self, plugin: Any) -> List[Tuple[str, str]]:
        out = []
        for name in dir(plugin):
            fn = _getattr(plugin, name, None) if name.startswith("pytest_") else None
            if _callable(fn):
                why = self.untrusted(fn)
                if why:
                    out.append((name, why))
        return out


# --- the checks -----------------------------------------------------------------------------
class _Run:
    """The session envlab runs (the first; a ``pytester`` session inside a test is the tests'):
    what it collected, what reported, the failures it reported, the tests' own code."""

    def __init__(self, session: Any) -> None:
        self.session, self.depth, self.failed = session, 0, 0
        self.items: List[Tuple[Any, List[Any]]] = []
        self.ran: Set[str] = set()
        self.tests = Watch()

    def collected(self, items: List[Any]) -> None:
        pm = self.session.config.pluginmanager
        mods = {_id(m): m for m in _getattr(pm, "_conftest_plugins", ())}
        for item in items:
            fns = _functions(_vars(item).get("_obj"))  # the test function, as collected
            self.items.append((item, fns))
            for fn in fns:
                self.tests.code(str(item.nodeid), fn)
            mods[_id(_getattr(item, "module", None))] = _getattr(item, "module", None)
        for mod in [m for m in mods.values() if _isinstance(m, types.ModuleType)]:
            for attr, value in list(_vars(mod).items()):  # the functions and classes defined
                if _getattr(value, "__module__", None) != mod.__name__:
                    continue
                if _isinstance(value, (type, types.FunctionType)):
                    self.tests.key(mod.__name__ + ":" + attr, _vars(mod), attr)
                if _isinstance(value, type):
                    self.tests.space(mod.__name__ + ":" + attr + ".", _vars(value))

    def outcome(self, exitstatus: int) -> List[str]:
        out = ["the tests' own " + p for p in self.tests.problems()]
        for item, fns in self.items:
            now = _functions(_vars(item).get("_obj"))
            if now and fns and now != fns:
                out.append(f"the test function of {item.nodeid} replaced")
            for name in _vars(item):  # a method of the item's class, shadowed on the item
                if _isinstance(_getattr(type(item), name, None), types.FunctionType):
                    out.append(f"{item.nodeid}: {name} set on the test item")
        if exitstatus == 0 and self.failed:
            out.append(f"{self.failed} test report(s) failed, yet the session exits 0")
        missing = [str(i.nodeid) for i, _ in self.items if str(i.nodeid) not in self.ran]
        collect_only = _getattr(self.session.config.option, "collectonly", False)
        if exitstatus == 0 and missing and not collect_only:
            out.append(f"{len(missing)} collected test(s) never ran ({missing[0]}), yet exit 0")
        return out


_CODE: List[Watch] = []
"""pytest's code: the hot modules' (checked after each test), then the others'."""
_TRUSTED: Optional[_Trusted] = None
_HOOKS: Dict[int, _Hooks] = {}
_RUN: List[_Run] = []
_TAINTED: List[str] = []


def arm(config: Any) -> None:
    """Snapshot pytest's code and ``config``'s hooks (once: the first session's)."""
    global _TRUSTED
    if not _CODE:
        _TRUSTED = _Trusted()
        _CODE.extend([watch_code(hot=True), watch_code(hot=False)])
    if not _HOOKS:
        pm = config.pluginmanager
        _HOOKS[_id(pm)] = _Hooks(pm)


def problems(everything: bool = True) -> List[str]:
    """What changed in pytest's code and hooks since ``arm`` (not ``everything``: the hot
    modules' code and the hooks only)."""
    if _TRUSTED is None:
        return []
    out = []
    for w in _CODE if everything else _CODE[:1]:
        out += w.problems()
    for hooks in _HOOKS.values():
        for mod in _getattr(hooks.manager, "_conftest_plugins", ()):
            _TRUSTED.add_tests(_getattr(mod, "__file__", None))
        out += hooks.problems(_TRUSTED)
    return out


def check(where: str, everything: bool = True, extra: Tuple[str, ...] = ()) -> List[str]:
    """Taint the session with what changed (reported at once: it cannot be taken back)."""
    new = [p for p in problems(everything) + list(extra) if p not in _TAINTED]
    if new:
        _TAINTED.extend(new)
        shown = "; ".join(new[:_MAX_PROBLEMS]) + (" ..." if len(new) > _MAX_PROBLEMS else "")
        report(f"tainted {_getpid()} {where}: {shown}"[:2000])
    return list(_TAINTED)


def _run(session: Any = None) -> Optional[_Run]:
    """The session envlab runs, if ``session`` is it (or, without one, if no other runs)."""
    run = _RUN[0] if _RUN else None
    if run is None or (session is not None and session is not run.session):
        return None
    return run if session is not None or run.depth == 1 else None


def _say_tainted() -> None:
    shown = "\n  ".join(_TAINTED[:_MAX_PROBLEMS])
    text = (
        "\nenvlab: grader_tainted: pytest's own code was changed while the tests ran (code "
        "under test runs in pytest's process); this session's results cannot be trusted and "
        "the grade is invalid:\n  " + shown + "\n"
    )
    with contextlib.suppress(OSError):
        _write(2, text.encode(errors="replace"))


def _hookimpl(**opts: bool) -> Any:
    """pluggy's hook marker, without importing pytest (optional: any pytest version)."""
    marks = dict(hookwrapper=False, optionalhook=True, tryfirst=False, trylast=False,
                 specname=None, wrapper=False)  # fmt: skip
    marks.update(opts)

    def mark(fn: Any) -> Any:
        fn.pytest_impl = marks
        return fn

    return mark


# --- pytest's hooks -------------------------------------------------------------------------
@_hookimpl(trylast=True)
def pytest_load_initial_conftests(early_config: Any) -> None:
    # the last before the conftests load (pytest's own are trylast and registered earlier, so
    # called after this): pytest has set itself up (legacypath's patches), no task code has run
    arm(early_config)


@_hookimpl()
def pytest_plugin_registered(plugin: Any, manager: Any) -> None:
    hooks = _HOOKS.get(_id(manager))
    if hooks is not None and hooks.manager is manager:
        hooks.late.append(plugin)


@_hookimpl()
def pytest_sessionstart(session: Any) -> None:
    report(f"start {_getpid()}")
    arm(session.config)  # a no-op unless the hook above did not run
    if not _RUN:
        _RUN.append(_Run(session))
    _RUN[0].depth += 1


@_hookimpl()
def pytest_collection_finish(session: Any) -> None:
    run = _run(session)
    if run is None or _TRUSTED is None:
        return
    for item in _getattr(session, "items", ()):
        _TRUSTED.add_tests(_getattr(item, "path", None) or _getattr(item, "fspath", None))
    run.collected(list(_getattr(session, "items", ())))
    check("after collection")


@_hookimpl()
def pytest_runtest_logreport(report: Any) -> None:
    run = _run()
    if run is None:
        return
    run.ran.add(str(report.nodeid))
    if _getattr(report, "outcome", None) == "failed" and not _hasattr(report, "wasxfail"):
        run.failed += 1  # as pytest's Session counts them
    if _getattr(report, "when", "call") == "call":
        check("after a test", everything=False)


@_hookimpl(trylast=True)
def pytest_sessionfinish(session: Any, exitstatus: Any) -> None:
    run = _run(session)
    if _RUN:
        _RUN[0].depth -= 1
    extra = run.outcome(int(exitstatus)) if run is not None else []
    if check("at the end", extra=tuple(extra)):
        _say_tainted()
        session.exitstatus = 3  # pytest's INTERNAL_ERROR; no "finish": the grade is invalid
        return
    report(f"finish {_getpid()} {int(exitstatus)}")
