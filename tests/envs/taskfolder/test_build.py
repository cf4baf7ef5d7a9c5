"""Building workspaces: real builds in a sandbox, cached by content hash."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from envlab.envs.taskfolder import load_task_folder
from envlab.sandbox.tasks import DockerfileError, prepare_workspace
from tests.envs.taskfolder.conftest import make_task, write
from tests.sandbox.conftest import requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.filterwarnings("ignore:.*FROM.*is not met:RuntimeWarning"),
]


async def test_dockerfile_build_is_cached_by_content(tmp_path: Path) -> None:
    path = make_task(
        tmp_path,
        dockerfile="FROM x\nWORKDIR /app/w\nCOPY a.txt b/ ./\nENV K=v\nRUN echo $K > made.txt\n",
        files={"a.txt": "A", "b/c.txt": "C", ".dockerignore": "b/skip*\n", "b/skip.txt": "S"},
    )
    first = await prepare_workspace(load_task_folder(path))
    app = first.app_dir
    assert first.workdir == "/app/w" and first.env == {"K": "v"}
    assert (app / "w" / "a.txt").read_text() == "A"
    assert (app / "w" / "c.txt").read_text() == "C", "COPY of a directory copies its contents"
    assert not (app / "w" / "skip.txt").exists(), ".dockerignore is honoured"
    assert (app / "w" / "made.txt").read_text() == "v\n"
    assert (app / "w" / "made.txt").stat().st_uid == 0, "the cache belongs to root"
    again = await prepare_workspace(load_task_folder(path))
    assert again.key == first.key and again.build_s == first.build_s, "built once"
    write(path / "environment" / "a.txt", "changed")
    changed = await prepare_workspace(load_task_folder(path))
    assert changed.key != first.key and (changed.app_dir / "w" / "a.txt").read_text() == "changed"


async def test_no_dockerfile_copies_the_environment_and_runs_setup(tmp_path: Path) -> None:
    path = make_task(
        tmp_path,
        files={"data/x.txt": "x", "setup.sh": "#!/bin/bash\nls data > listing.txt\n"},
    )
    ws = await prepare_workspace(load_task_folder(path))
    assert (ws.app_dir / "data" / "x.txt").read_text() == "x"
    assert (ws.app_dir / "listing.txt").read_text() == "x.txt\n"
    assert not (ws.app_dir / "setup.sh").exists()


async def test_add_unpacks_a_local_archive_and_file_renames(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"inside"
        info = tarfile.TarInfo("dir/in.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    path = make_task(tmp_path, dockerfile="ADD pack.tgz /app/unpacked/\nCOPY one.txt two.txt\n")
    (path / "environment" / "pack.tgz").write_bytes(buf.getvalue())
    write(path / "environment" / "one.txt", "1")
    ws = await prepare_workspace(load_task_folder(path))
    assert (ws.app_dir / "unpacked" / "dir" / "in.txt").read_text() == "inside"
    assert (ws.app_dir / "two.txt").read_text() == "1"


async def test_a_failing_run_names_the_line_and_shows_the_output(tmp_path: Path) -> None:
    path = make_task(tmp_path, dockerfile="FROM x\nWORKDIR /app\nRUN echo boom >&2; exit 7\n")
    with pytest.raises(DockerfileError) as e:
        await prepare_workspace(load_task_folder(path))
    msg = str(e.value)
    assert "Dockerfile:3" in msg and "exited with code 7" in msg and "boom" in msg


async def test_build_commands_cannot_write_outside_the_workspace(tmp_path: Path) -> None:
    path = make_task(tmp_path, dockerfile="RUN apt-get install -y cowsay\n")
    with pytest.raises(DockerfileError, match="unprivileged user"):
        await prepare_workspace(load_task_folder(path))
    missing = make_task(tmp_path, "m", dockerfile="COPY nothere.txt /app/\n")
    with pytest.raises(DockerfileError, match="not found"):
        await prepare_workspace(load_task_folder(missing))


async def test_an_unmet_from_is_said_once_per_run_per_image(tmp_path: Path) -> None:
    """Forty tasks on one base image give one warning, not forty; a cached build says it too."""
    import warnings

    from envlab.sandbox.tasks import host_build as build

    image = f"python:3.11-once-{tmp_path.name}"
    paths = [
        make_task(tmp_path / f"t{i}", dockerfile=f"FROM {image}\nRUN echo {i} > n.txt\n")
        for i in range(3)
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for p in paths:
            await prepare_workspace(load_task_folder(p))
        build._warned_bases.discard(image)  # a new run: the cached builds still say it, once
        for p in paths:
            await prepare_workspace(load_task_folder(p))
    lines = [str(w.message) for w in caught if image in str(w.message)]
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"FROM {image} is not met") and "once per run" in lines[0]


async def test_heredocs_and_copy_flags_build_in_the_host_mode(tmp_path: Path) -> None:
    """What the one reader gives the host mode: heredocs in RUN and COPY, ``--exclude``, and
    ``--chmod`` on a copied directory's files, dotfiles included."""
    dockerfile = (
        "FROM x\nWORKDIR /app\n"
        "RUN <<EOF\necho one > run.txt\necho two >> run.txt\nEOF\n"
        "COPY <<EOF notes/inline.txt\ninline body\nEOF\n"
        "COPY --chmod=600 --exclude=*.skip conf/ conf/\n"
    )
    files = {"conf/.hidden": "h", "conf/a.txt": "a", "conf/b.skip": "s"}
    path = make_task(tmp_path, dockerfile=dockerfile, files=files)
    app = (await prepare_workspace(load_task_folder(path))).app_dir
    assert (app / "run.txt").read_text() == "one\ntwo\n"
    assert (app / "notes" / "inline.txt").read_text() == "inline body\n"
    assert (app / "conf" / ".hidden").stat().st_mode & 0o777 == 0o600
    assert (app / "conf" / "a.txt").stat().st_mode & 0o777 == 0o600
    assert not (app / "conf" / "b.skip").exists()


async def test_a_failing_setup_script_says_so(tmp_path: Path) -> None:
    path = make_task(tmp_path, files={"setup.sh": "echo nope >&2; exit 4\n"})
    with pytest.raises(DockerfileError) as e:
        await prepare_workspace(load_task_folder(path))
    assert "`bash setup.sh` exited with code 4" in str(e.value) and "nope" in str(e.value)
