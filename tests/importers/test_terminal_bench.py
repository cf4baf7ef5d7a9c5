"""Terminal-Bench 1 task folders mapped to Harbor task folders, on small synthetic TB1 tasks."""

from __future__ import annotations

import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from envlab.core.errors import ConfigError
from envlab.envs.taskfolder.model import load_task_folder
from envlab.importers.terminal_bench import import_terminal_bench
from envlab.importers.terminal_bench.compose import (
    can_collapse,
    dockerfile_additions,
    with_platform,
)
from envlab.importers.terminal_bench.solution import solve_sh_from_steps

yaml = pytest.importorskip("yaml")

TASK_YAML = """\
instruction: |-
  Write hello to /app/out.txt.
author_name: Ada
author_email: ada@example.com
difficulty: easy
category: file-operations
tags: [files, "quote\\"d"]
parser_name: pytest
max_agent_timeout_sec: 120.0
max_test_timeout_sec: 30.0
run_tests_in_same_shell: false
"""
COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
    volumes:
      - ${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}
"""
RUN_TESTS = "#!/bin/bash\nbash $TEST_DIR/run.sh\npytest ${TEST_DIR}/test_out.py"


def make_tb1_task(root: Path, name: str = "hello", **files: str | None) -> Path:
    """A TB1 task folder; ``files`` (path with ``__`` for ``/``) override or drop (None) files."""
    defaults: dict[str, str | None] = {
        "task.yaml": TASK_YAML,
        "docker-compose.yaml": COMPOSE,
        "Dockerfile": "FROM python:3.13\nWORKDIR /app",
        "run-tests.sh": RUN_TESTS,
        "solution.sh": "#!/bin/bash\necho hello > /app/out.txt\n",
        "tests/test_out.py": "def test_out():\n    assert True\n",
        "tests/run.sh": "true\n",
        "task-deps/data.csv": "a,b\n",
    }
    task = root / name
    for rel, text in (defaults | {k.replace("__", "/"): v for k, v in files.items()}).items():
        if text is not None:
            (task / rel).parent.mkdir(parents=True, exist_ok=True)
            (task / rel).write_text(text)
    return task


def test_a_task_is_mapped_the_way_harbor_maps_it(tmp_path: Path) -> None:
    src = make_tb1_task(tmp_path / "tb1")
    report = import_terminal_bench(src, tmp_path / "out")
    [result] = report.tasks
    assert (result.status, result.compose, result.reason) == ("mapped", False, None)
    out = Path(result.dest or "")
    assert out == (tmp_path / "out" / "hello").resolve()
    assert (out / "instruction.md").read_text() == "Write hello to /app/out.txt.\n"
    assert (out / "environment" / "Dockerfile").read_text() == (
        "FROM python:3.13\nWORKDIR /app\n\n# Mapped from docker-compose.yaml\nENV TEST_DIR=/tests\n"
    )
    assert (out / "environment" / "task-deps" / "data.csv").read_text() == "a,b\n"
    test_sh = (out / "tests" / "test.sh").read_text()
    assert test_sh.startswith("#!/bin/bash\nbash /tests/run.sh\npytest /tests/test_out.py\n")
    assert "echo 1 > /logs/verifier/reward.txt" in test_sh and "exit $_EXIT_CODE" in test_sh
    assert os.access(out / "tests" / "test.sh", os.X_OK)
    assert os.access(out / "solution" / "solve.sh", os.X_OK)
    assert sorted(p.name for p in (out / "tests").iterdir()) == ["run.sh", "test.sh", "test_out.py"]
    assert sorted(p.name for p in (out / "environment").iterdir()) == ["Dockerfile", "task-deps"]


def test_the_task_toml_loads_with_harbors_settings(tmp_path: Path) -> None:
    import_terminal_bench(make_tb1_task(tmp_path / "tb1"), tmp_path / "out")
    task = load_task_folder(tmp_path / "out" / "hello")
    config = task.config
    assert (config.agent.timeout_sec, config.verifier.timeout_sec) == (120.0, 30.0)
    assert config.metadata == {
        "author_name": "Ada",
        "author_email": "ada@example.com",
        "difficulty": "easy",
        "category": "file-operations",
        "tags": ["files", 'quote"d'],
    }
    assert config.schema_version == "1.4" and config.unknown_keys() == []
    # Harbor writes its default network (public): TB1 agents had the internet; envlab grades
    # offline (what test.sh fetches comes from the caches filled at build time)
    assert config.network_for("agent") and not config.network_for("verifier")
    assert task.solution is not None and task.dockerfile is not None


def test_a_folder_of_tasks_reports_each_and_leaves_no_half_written_folder(tmp_path: Path) -> None:
    make_tb1_task(tmp_path / "tb1", "good")
    make_tb1_task(tmp_path / "tb1", "no-instruction", **{"task.yaml": "difficulty: easy\n"})
    make_tb1_task(tmp_path / "tb1", "no-compose", **{"docker-compose.yaml": None})
    make_tb1_task(tmp_path / "tb1", "bad-level", **{"task.yaml": TASK_YAML + "difficulty: epic\n"})
    make_tb1_task(tmp_path / "tb1", "odd-compose", **{"docker-compose.yaml": "services:\n  a: x\n"})
    (tmp_path / "tb1" / "not-a-task").mkdir()
    report = import_terminal_bench(tmp_path / "tb1", tmp_path / "out")
    by_name = {t.name: t for t in report.tasks}
    assert sorted(by_name) == ["bad-level", "good", "no-compose", "no-instruction", "odd-compose"]
    assert [t.name for t in report.mapped] == ["good"]
    assert "instruction" in (by_name["no-instruction"].reason or "")
    assert "no docker-compose.yaml" in (by_name["no-compose"].reason or "")
    assert "difficulty" in (by_name["bad-level"].reason or "")
    assert "not a mapping" in (by_name["odd-compose"].reason or "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["good"]


def test_an_existing_destination_is_kept_unless_overwrite(tmp_path: Path) -> None:
    src = make_tb1_task(tmp_path / "tb1")
    (tmp_path / "out" / "hello").mkdir(parents=True)
    (tmp_path / "out" / "hello" / "mine.txt").write_text("keep")
    [refused] = import_terminal_bench(src, tmp_path / "out").tasks
    assert refused.status == "failed" and "--overwrite" in (refused.reason or "")
    assert (tmp_path / "out" / "hello" / "mine.txt").read_text() == "keep"
    [done] = import_terminal_bench(src, tmp_path / "out", overwrite=True).tasks
    assert done.status == "mapped"
    assert not (tmp_path / "out" / "hello" / "mine.txt").exists()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hello"]


def test_a_failed_overwrite_keeps_the_old_folder(tmp_path: Path) -> None:
    src = make_tb1_task(tmp_path / "tb1", **{"run-tests.sh": None})
    (tmp_path / "out" / "hello").mkdir(parents=True)
    [failed] = import_terminal_bench(src, tmp_path / "out", overwrite=True).tasks
    assert failed.status == "failed" and "run-tests.sh" in (failed.reason or "")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hello"]


def test_sources_that_are_not_tb1_tasks_are_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="neither a Terminal-Bench task folder"):
        import_terminal_bench(tmp_path / "empty", tmp_path / "out")
    with pytest.raises(ConfigError, match="not a directory"):
        import_terminal_bench(tmp_path / "nowhere", tmp_path / "out")
    src = make_tb1_task(tmp_path / "tb1")
    with pytest.raises(ConfigError, match="inside a task"):
        import_terminal_bench(src, src / "out")


def test_a_client_build_context_and_referenced_tests_go_to_the_environment(tmp_path: Path) -> None:
    compose = textwrap.dedent("""\
        services:
          client:
            build:
              context: ./client
              dockerfile: Dockerfile
            image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
            platform: linux/amd64
            working_dir: /app
            environment:
              - TEST_DIR=${T_BENCH_TEST_DIR}
              - MODE=fast
    """)
    src = make_tb1_task(
        tmp_path / "tb1", Dockerfile=None, **{"docker-compose.yaml": compose},
        client__Dockerfile="FROM ubuntu:24.04\nCOPY tests /opt/tests\n", client__setup__a="x",
    )  # fmt: skip
    [result] = import_terminal_bench(src, tmp_path / "out").tasks
    env = tmp_path / "out" / "hello" / "environment"
    assert result.status == "mapped" and not result.compose, result
    assert (env / "setup" / "a").read_text() == "x" and not (env / "client").exists()
    assert (env / "tests" / "test_out.py").is_file()  # COPY tests: Harbor copies them too
    dockerfile = (env / "Dockerfile").read_text()
    assert dockerfile.startswith("FROM --platform=linux/amd64 ubuntu:24.04\n")
    assert dockerfile.endswith("ENV TEST_DIR=/tests\nENV MODE=fast\nWORKDIR /app\n")


def test_a_compose_that_cannot_collapse_is_written_as_harbor_writes_it(tmp_path: Path) -> None:
    compose = COMPOSE + (
        "    tmpfs:\n      - /root/.cache:size=100M\n"
        "  db:\n    build:\n      context: db\n    image: ${T_BENCH_TASK_DOCKER_NAME_PREFIX}__db\n"
    )
    src = make_tb1_task(tmp_path / "tb1", **{"docker-compose.yaml": compose},
                        db__Dockerfile="FROM postgres:15\n")  # fmt: skip
    [result] = import_terminal_bench(src, tmp_path / "out").tasks
    env = tmp_path / "out" / "hello" / "environment"
    assert result.status == "mapped" and result.compose
    written = yaml.safe_load((env / "docker-compose.yaml").read_text())
    assert list(written["services"]) == ["main", "db"]
    main = written["services"]["main"]
    assert main["build"] == {"context": "${CONTEXT_DIR}"} and main["image"] == "${MAIN_IMAGE_NAME}"
    assert main["tmpfs"] == ["/root/.cache:size=100M"] and "volumes" not in main
    assert written["services"]["db"]["image"] == "hb__db"
    assert (env / "db" / "Dockerfile").read_text() == "FROM postgres:15\n"


def test_what_can_collapse_into_a_dockerfile() -> None:
    base = yaml.safe_load(COMPOSE)
    assert can_collapse(base)
    client = base["services"]["client"]
    assert not can_collapse({"services": {"client": client | {"tmpfs": ["/x"]}}})
    assert not can_collapse({"services": {"client": client | {"volumes": ["./a:/b"]}}})
    assert not can_collapse({"services": {"client": client, "db": {"image": "pg"}}})
    assert not can_collapse({"services": {"client": client}, "networks": {"n": {}}})
    service = {"environment": {"A": 1}, "expose": 8080, "entrypoint": "/run.sh",
               "working_dir": "${HOME}"}  # fmt: skip
    assert dockerfile_additions(service) == [
        "ENV TEST_DIR=/tests", "ENV A=1", "EXPOSE 8080", 'ENTRYPOINT ["/run.sh"]'
    ]  # fmt: skip
    assert with_platform("FROM --platform=linux/arm64 a\n", "linux/amd64") == (
        "FROM --platform=linux/amd64 a\n"
    )


def test_a_solution_yaml_becomes_a_solve_sh_that_runs_the_commands_in_order(
    tmp_path: Path,
) -> None:
    steps = [
        {"command": "mkdir -p work", "block": True},
        {"command": "cd work", "min_timeout_sec": 0.1},
        {"command": "echo -n par", "append_enter": False},
        {"command": "t > joined.txt", "block": True},
        {"command": "python3", "block": False},
        {"command": "open('from_repl.txt', 'w').write('ok')"},
        {"command": "quit()"},
        {"command": "cat > note.txt << 'EOF'\nline one\nEOF\n", "block": True},
    ]
    text, notes = solve_sh_from_steps(steps)
    assert text.startswith("#!/bin/bash\n# Converted by envlab")
    assert "python3 <<'ENVLAB_REPL_EOF'\n" in text and any("python3" in n for n in notes)
    solve = tmp_path / "solve.sh"
    solve.write_text(text)
    done = subprocess.run(["bash", str(solve)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    work = tmp_path / "work"
    assert (work / "joined.txt").read_text() == "part"  # typed as one line: echo -n part
    assert (work / "from_repl.txt").read_text() == "ok"
    assert (work / "note.txt").read_text() == "line one\n"


def test_an_obvious_server_runs_in_the_background() -> None:
    text, notes = solve_sh_from_steps(
        [
            {"command": "python3 -m http.server 8000", "block": False, "min_timeout_sec": 2},
            {"command": "python3 -m http.server 8001", "block": True},
            {"command": "curl localhost:8000"},
        ]
    )
    lines = text.splitlines()
    assert (
        "nohup bash -c 'python3 -m http.server 8000' > /tmp/solve-background-0.log 2>&1 &" in lines
    )
    assert "sleep 2" in lines and "python3 -m http.server 8001" in lines
    assert notes == ["in the background: python3 -m http.server 8000"]


def test_a_task_with_solution_yaml_is_mapped_and_the_yaml_stays_hidden(tmp_path: Path) -> None:
    src = make_tb1_task(
        tmp_path / "tb1", **{"solution.sh": None,
                            "solution.yaml": "- command: echo hi > /app/out.txt\n  block: true\n"},
    )  # fmt: skip
    [result] = import_terminal_bench(src, tmp_path / "out").tasks
    out = tmp_path / "out" / "hello"
    assert result.status == "mapped" and "solve.sh converted from solution.yaml" in result.notes
    assert (out / "solution" / "solve.sh").read_text().endswith("\necho hi > /app/out.txt\n")
    assert not list(out.rglob("solution.yaml"))
    bad = make_tb1_task(tmp_path / "tb1", "bad", **{"solution.sh": None, "solution.yaml": "{}"})
    [failed] = import_terminal_bench(bad, tmp_path / "out").tasks
    assert failed.status == "failed" and "solution.yaml" in (failed.reason or "")


@pytest.mark.parametrize(
    ("solve", "shared"),
    [
        ("nohup python3 server.py &\nsleep 2\n", True),
        ("python3 -m http.server 8000 > /dev/null 2>&1 &\n", True),
        ("service nginx start\n", True),
        ("make && ./run --check && echo ok\n", False),
        ("# nohup in a comment only &\necho hi\n", False),
    ],
)
def test_a_solution_that_leaves_a_process_running_asks_for_the_shared_mode(
    tmp_path: Path, solve: str, shared: bool
) -> None:
    from envlab.importers.terminal_bench.verifier_mode import starts_a_service

    path = tmp_path / "solve.sh"
    path.write_text("#!/bin/bash\n" + solve)
    assert starts_a_service(path) is shared
