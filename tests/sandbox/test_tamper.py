"""The shared mode's tamper evidence on a real filesystem: reads, rewrites, deletions and
replacements of an armed layer are seen; what the oracle changed is expected, by path."""

from __future__ import annotations

import os
from pathlib import Path

from envlab.sandbox.image.tamper import Expected, arm, check_records_reads, tainted, touched


def _layer(root: Path) -> Path:
    for rel in ("app/out.txt", "usr/lib/py/site/x.pth", "usr/lib/py/site/pkg/mod.py", "etc/c"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    os.symlink("/app/out.txt", root / "app/link")
    return root


def test_reads_rewrites_deletions_and_replacements_are_seen(tmp_path: Path) -> None:
    check_records_reads(tmp_path)  # this filesystem records reads (else an InfraError)
    layer = _layer(tmp_path / "layer")
    armed = arm(layer)
    assert touched(armed) == []
    (layer / "usr/lib/py/site/x.pth").read_text()  # read
    (layer / "etc/c").write_text("changed")  # rewritten
    (layer / "usr/lib/py/site/pkg/mod.py").unlink()  # deleted (maybe after a read)
    os.readlink(layer / "app/link")  # a link followed
    assert touched(armed) == sorted(
        ["app/link", "etc/c", "usr/lib/py/site/pkg/mod.py", "usr/lib/py/site/x.pth"]
    )


def test_hiding_a_read_by_resetting_the_time_is_seen(tmp_path: Path) -> None:
    layer = _layer(tmp_path / "layer")
    armed = arm(layer)
    path = layer / "usr/lib/py/site/x.pth"
    path.read_text()
    st = os.stat(path)
    os.utime(path, ns=(0, st.st_mtime_ns))  # the change time moves: no process can set it
    assert touched(armed) == ["usr/lib/py/site/x.pth"]


def test_only_unexpected_files_taint(tmp_path: Path) -> None:
    layer = _layer(tmp_path / "layer")
    armed = arm(layer)
    for rel in ("app/out.txt", "usr/lib/py/site/x.pth"):
        (layer / rel).read_text()
    expected = Expected({"app/out.txt", "usr/lib/py/site/pkg/mod.py"})
    assert tainted(armed, expected) == ["/usr/lib/py/site/x.pth"]


def test_names_that_differ_between_two_oracle_runs_make_a_volatile_directory() -> None:
    one = Expected({"app/runs/a1b2/model.pkl", "app/runs/a1b2/meta", "usr/lib/site/pkg/m.py"})
    two = Expected({"app/runs/c3d4/model.pkl", "app/runs/c3d4/meta", "usr/lib/site/pkg/m.py"})
    both = one.merged(two)
    assert both.volatile == {"app/runs"}
    assert both.covers("app/runs/e5f6/model.pkl")  # a third run's name
    assert both.covers("usr/lib/site/pkg/m.py")
    assert not both.covers("usr/lib/site/pkg/evil.pth")  # the oracle's package dir: no licence
    assert not both.covers("usr/lib/site/zz.pth")
