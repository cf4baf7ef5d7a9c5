"""Building a task's Dockerfile into an image without Docker: every instruction does what
Docker does, failures name their line, layers are cached, and an episode never writes them."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile
from pathlib import Path

import pytest

from envlab.core.errors import ConfigError
from envlab.envs.taskfolder.model import load_task_folder
from envlab.sandbox.image.bases import recipe_for
from envlab.sandbox.image.sandbox import ImageSandbox
from envlab.sandbox.image.store import Image
from envlab.sandbox.tasks.dockerfile import DockerfileError
from envlab.sandbox.tasks.runtime import host_mode_reason
from tests.envs.taskfolder import image_support
from tests.envs.taskfolder.image_support import (
    LIMITS,
    Events,
    build,
    needs_image_host,
    sh,
    write_task,
)

# the session's fixtures (a private ENVLAB_CACHE_DIR, the tiny base)
image_cache = image_support.image_cache
tiny_base = image_support.tiny_base
tiny_rootfs = image_support.tiny_rootfs

pytestmark = needs_image_host


def _tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, body in files.items():
            data = body.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


RICH = """\
ARG BASE=envlab-test/tiny:1
FROM ${BASE} AS builder
RUN mkdir -p /out && echo built-in-builder > /out/artifact.txt

FROM ${BASE}
ARG GREETING=hello
ENV APP_HOME=/workspace NAME=world
ENV MSG="${GREETING} ${NAME}"
COPY --from=builder /out/artifact.txt /opt/from-builder.txt
COPY conf.txt /etc/x
COPY conf.txt /opt/y/
COPY somedir /opt/dir
ADD bundle.tar.gz /opt/extracted/
COPY --chmod=755 tool.sh /usr/local/bin/tool
COPY <<EOF /etc/heredoc.txt
inline line one
EOF
RUN <<EOF
echo "heredoc script ran" > /opt/heredoc-run.txt
echo "$MSG" >> /opt/heredoc-run.txt
EOF
WORKDIR ${APP_HOME}/sub
COPY rel.txt .
RUN pwd > where.txt && echo "$GREETING|$MSG" > env.txt
SHELL ["/bin/bash", "-c"]
RUN echo "${BASH_VERSION:+bash}" > shell.txt
USER tester
RUN id -u > /home/tester/uid.txt
EXPOSE 8080
CMD ["python3", "-m", "http.server", "8080"]
"""

RICH_FILES: dict[str, str | bytes] = {
    "conf.txt": "conf-content\n",
    "somedir/a.txt": "A\n",
    "somedir/nested/b.txt": "B\n",
    "bundle.tar.gz": _tar_gz({"inner/data.txt": "from-the-tarball\n"}),
    "tool.sh": "#!/bin/sh\necho tool-ran\n",
    "rel.txt": "relative\n",
}


@pytest.fixture(scope="module")
def rich(tiny_base: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[Image, str]:
    task = write_task(tmp_path_factory.mktemp("rich"), "rich", RICH, files=RICH_FILES)
    image = build(task)
    script = """
    cd /
    for f in /opt/from-builder.txt /etc/x /opt/y/conf.txt /opt/dir/a.txt /opt/dir/nested/b.txt \
             /opt/extracted/inner/data.txt /etc/heredoc.txt /opt/heredoc-run.txt \
             /workspace/sub/rel.txt /workspace/sub/where.txt /workspace/sub/env.txt \
             /workspace/sub/shell.txt /home/tester/uid.txt; do
      printf '%s=' "$f"; tr '\\n' ' ' < "$f"; echo
    done
    printf 'tool-mode=%s\\n' "$(stat -c %a /usr/local/bin/tool)"
    printf 'tool-out=%s\\n' "$(tool)"
    printf 'tarball-kept=%s\\n' "$(test -e /opt/extracted/bundle.tar.gz && echo yes || echo no)"
    printf 'builder-out=%s\\n' "$(test -e /out && echo yes || echo no)"
    """
    return image, sh(image, script, user="root")


def _facts(out: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_multi_stage_copy_from_builder(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["/opt/from-builder.txt"].strip() == "built-in-builder"
    assert facts["builder-out"] == "no"  # the builder stage's files stay in the builder


def test_copy_to_anywhere_and_directories(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["/etc/x"].strip() == "conf-content"
    assert facts["/opt/y/conf.txt"].strip() == "conf-content"
    assert facts["/opt/dir/a.txt"].strip() == "A"
    assert facts["/opt/dir/nested/b.txt"].strip() == "B"


def test_add_extracts_a_local_tarball(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["/opt/extracted/inner/data.txt"].strip() == "from-the-tarball"
    assert facts["tarball-kept"] == "no"


def test_copy_chmod(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["tool-mode"] == "755"
    assert facts["tool-out"] == "tool-ran"


def test_run_heredoc_is_the_script(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["/opt/heredoc-run.txt"].strip() == "heredoc script ran hello world"


def test_copy_heredoc_to_a_file_path_writes_that_file(rich: tuple[Image, str]) -> None:
    """``COPY <<EOF /etc/heredoc.txt`` makes the file /etc/heredoc.txt (not a directory)."""
    facts = _facts(rich[1])
    assert facts["/etc/heredoc.txt"].strip() == "inline line one"


def test_workdir_env_arg_shell_user(rich: tuple[Image, str]) -> None:
    facts = _facts(rich[1])
    assert facts["/workspace/sub/rel.txt"].strip() == "relative"
    assert facts["/workspace/sub/where.txt"].strip() == "/workspace/sub"
    assert facts["/workspace/sub/env.txt"].strip() == "hello|hello world"
    assert facts["/workspace/sub/shell.txt"].strip() == "bash"
    assert facts["/home/tester/uid.txt"].strip() == "1000"


def test_image_config(rich: tuple[Image, str]) -> None:
    cfg = rich[0].config
    assert cfg.workdir == "/workspace/sub"
    assert cfg.env["MSG"] == "hello world"
    assert cfg.env["APP_HOME"] == "/workspace"
    assert "GREETING" not in cfg.env  # an ARG is not in the image
    assert cfg.user == "tester"
    assert cfg.expose == ["8080"]
    assert cfg.shell == ["/bin/bash", "-c"]
    assert cfg.cmd == ["python3", "-m", "http.server", "8080"]


def test_container_starts_as_the_image_user_in_its_workdir(rich: tuple[Image, str]) -> None:
    out = sh(rich[0], 'id -u; pwd; echo "$MSG"')
    assert out.split("\n")[:3] == ["1000", "/workspace/sub", "hello world"]


def test_copy_chmod_into_a_directory_touches_only_the_copied_files(
    tiny_base: str, tmp_path: Path
) -> None:
    """Docker applies --chmod/--chown to the files copied, not to the destination's others."""
    dockerfile = (
        f"FROM {tiny_base}\n"
        "RUN mkdir -p /opt/bin && echo keep > /opt/bin/keep.txt && chmod 644 /opt/bin/keep.txt\n"
        "COPY --chmod=700 tool.sh /opt/bin/\n"
    )
    task = write_task(tmp_path, "chmod", dockerfile, files={"tool.sh": "#!/bin/sh\n"})
    out = sh(build(task), "stat -c '%n %a' /opt/bin/keep.txt /opt/bin/tool.sh", user="root")
    assert out.split("\n")[:2] == ["/opt/bin/keep.txt 644", "/opt/bin/tool.sh 700"]


# --- failures --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "run",
    [
        "RUN false",
        "RUN sh -c 'exit 3'",
        "RUN echo one; echo two; false",
        "RUN <<EOF\necho fine\ntrue\nfalse\nEOF",
    ],
)
def test_a_failing_run_fails_the_build_naming_its_line(
    tiny_base: str, tmp_path: Path, run: str
) -> None:
    dockerfile = f"FROM {tiny_base}\nRUN echo ok > /ok\n{run}\nRUN echo after > /after\n"
    task = write_task(tmp_path, "fails", dockerfile)
    with pytest.raises(DockerfileError) as e:
        build(task)
    assert "Dockerfile:3" in str(e.value)
    assert "exited with code" in str(e.value)


@pytest.mark.parametrize(
    ("instruction", "words"),
    [
        ("RUN --mount=type=secret,id=x true", "--mount=type=secret"),
        ("ONBUILD RUN echo x", "ONBUILD"),
    ],
)
def test_what_cannot_be_honoured_is_an_error_naming_the_line(
    tiny_base: str, tmp_path: Path, instruction: str, words: str
) -> None:
    task = write_task(tmp_path, "refused", f"FROM {tiny_base}\nRUN true\n{instruction}\n")
    with pytest.raises(DockerfileError) as e:
        build(task)
    assert "Dockerfile:3" in str(e.value)
    assert words in str(e.value)


def test_an_unknown_base_names_the_families_it_could_build(tiny_base: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        recipe_for("some/unknown-image:1")
    msg = str(e.value)
    assert "some/unknown-image:1" in msg
    for family in ("debian", "ubuntu", "python", "register_base"):
        assert family in msg
    unknown = write_task(tmp_path, "unknown", "FROM some/unknown-image:1\nRUN true\n")
    reason = host_mode_reason(load_task_folder(unknown), "auto")
    assert reason is not None and "some/unknown-image:1" in reason
    known = write_task(tmp_path, "known", f"FROM {tiny_base}\nRUN true\n")
    assert host_mode_reason(load_task_folder(known), "auto") is None
    assert host_mode_reason(load_task_folder(known), "off") is not None


# --- the layer cache -------------------------------------------------------------------------
CACHED = """\
FROM envlab-test/tiny:1
RUN echo first > /first
COPY a.txt /a.txt
RUN cat /a.txt > /b.txt
COPY c.txt /c.txt
"""


def test_a_second_build_finds_every_layer(tiny_base: str, tmp_path: Path) -> None:
    task = write_task(tmp_path, "cached", CACHED, files={"a.txt": "one\n", "c.txt": "c\n"})
    first, second = Events(), Events()
    image = build(task, first)
    assert len(first.built()) == 4
    again = build(task, second)
    assert second.built() == []
    assert len(second.cached()) == 4
    assert again.layers == image.layers and again.key == image.key


def test_changing_a_context_file_rebuilds_from_its_copy(tiny_base: str, tmp_path: Path) -> None:
    task = write_task(tmp_path, "rebuild", CACHED, files={"a.txt": "one\n", "c.txt": "c\n"})
    build(task)
    (task / "environment" / "a.txt").write_text("two\n")
    events = Events()
    image = build(task, events)
    built = [w.split(": ", 1)[1] for w in events.built()]
    cached = [w.split(": ", 1)[1] for w in events.cached()]
    assert cached == ["RUN echo first > /first"]
    assert built == ["COPY a.txt /a.txt", "RUN cat /a.txt > /b.txt", "COPY c.txt /c.txt"]
    assert sh(image, "cat /b.txt", user="root") == "two\n"


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for top in paths:
        for dirpath, dirs, files in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + files):
                p = Path(dirpath, name)
                st = p.lstat()
                h.update(f"{p.relative_to(top)}\0{st.st_mode:o}\0{st.st_size}\0".encode())
                if p.is_file() and not p.is_symlink():
                    h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def test_an_episode_never_writes_the_image_layers(tiny_base: str, tmp_path: Path) -> None:
    dockerfile = f"FROM {tiny_base}\nCOPY conf.txt /etc/x\n"
    dockerfile += "RUN mkdir -p /opt && echo layer > /opt/layer.txt\n"
    image = build(write_task(tmp_path, "ro", dockerfile, files={"conf.txt": "original\n"}))
    before = _digest(image.lowers)

    async def episode() -> Path:
        box = await ImageSandbox.create(image=image, limits=LIMITS)
        try:
            cmd = "echo changed > /etc/x; rm /opt/layer.txt; echo new > /bin/new; rm -f /bin/ls"
            res = await box.exec(["bash", "-c", cmd], timeout=30)
            assert res.exit_code == 0, res.stderr
            assert (box.upper / "etc" / "x").read_text() == "changed\n"
            return box.upper
        finally:
            await box.close()

    asyncio.run(episode())
    assert _digest(image.lowers) == before
    assert sh(image, "cat /etc/x; cat /opt/layer.txt; test -x /bin/ls && echo ls") == (
        "original\nlayer\nls\n"
    )


def test_a_base_built_for_the_task_is_not_on_its_build_clock(
    tiny_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run on a machine builds each base (minutes with mmdebstrap): that is the
    machine's set-up, not the task's build, so ``build_timeout_sec`` does not count it. The
    base here takes 10 minutes of a fake clock; the task's own steps fit in its 60 s."""
    import types

    from envlab.sandbox.image import bases
    from envlab.sandbox.tasks import build_steps, image_build

    now = [1000.0]
    clock = types.SimpleNamespace(monotonic=lambda: now[0])
    monkeypatch.setattr(build_steps, "time", clock)
    monkeypatch.setattr(image_build, "time", clock)
    real = bases.ensure_base

    def slow_base(*args: object, **kwargs: object) -> object:
        now[0] += 600.0
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(image_build, "ensure_base", slow_base)
    task = write_task(
        tmp_path, "slow-base", f"FROM {tiny_base}\nRUN echo ok > /built.txt\n",
        toml="[environment]\nbuild_timeout_sec = 60\n",
    )  # fmt: skip
    image = build(task)
    assert sh(image, "cat /built.txt").strip() == "ok"
    # the task's own steps still have a clock: one that outlasts it is stopped
    monkeypatch.setattr(image_build, "ensure_base", real)
    late = write_task(
        tmp_path, "slow-step", f"FROM {tiny_base}\nRUN echo one\nRUN echo two\n",
        toml="[environment]\nbuild_timeout_sec = 60\n",
    )  # fmt: skip
    steps_execute = build_steps.Steps.execute

    async def late_step(self: build_steps.Steps, box: object, step: object) -> None:
        now[0] += 45.0
        await steps_execute(self, box, step)  # type: ignore[arg-type]

    monkeypatch.setattr(build_steps.Steps, "execute", late_step)
    with pytest.raises(DockerfileError, match="build_timeout_sec"):
        build(late)
