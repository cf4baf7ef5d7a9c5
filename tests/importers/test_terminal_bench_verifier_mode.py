"""Which verifier mode an imported TB1 task gets: shared only where the tests need the agent's
system state, each reason named (a static reading of solve.sh and the tests)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from envlab.envs.taskfolder.model import load_task_folder
from envlab.importers.terminal_bench import import_terminal_bench
from envlab.importers.terminal_bench.verifier_mode import shared_reasons, workdir_of
from tests.importers.test_terminal_bench import make_tb1_task


def reasons(tmp_path: Path, solve: str, tests: dict[str, str] | None = None) -> list[str]:
    (tmp_path / "solve.sh").write_text("#!/bin/bash\n" + solve)
    (tmp_path / "tests").mkdir(exist_ok=True)
    for name, text in (tests or {"test_out.py": "open('/app/out.txt').read()\n"}).items():
        (tmp_path / "tests" / name).write_text(text)
    return shared_reasons(tmp_path / "solve.sh", tmp_path / "tests", "/app")


def test_a_solution_that_changes_only_the_workspace_stays_separate(tmp_path: Path) -> None:
    solve = """\
# apt-get install -y jq, in a comment only
cd /app && echo hello > /app/out.txt
mkdir -p /app/build build/obj && cp out.txt /app/build/ && ln -s /app/out.txt link
sed -i 's/hello/world/' /app/out.txt
cat > notes.md <<'EOF'
nothing outside
EOF
curl -fsSL https://example.com/a/b -o data.json 2>/dev/null
rm -rf /tmp/scratch && mkdir -p /tmp/scratch && echo x > /tmp/scratch/y
python3 -m venv /app/venv && . /app/venv/bin/activate && pip install numpy
/app/venv/bin/pip install -r requirements.txt
pip install --target /app/lib requests && pip install --upgrade pip
uv pip install pandas && make -j4 && cmake --build build
echo done >> /logs/agent/solve.log
sed -i 's/AKIA[0-9A-Z]*/<redacted>/Ig' /app/config.yaml
sed -i '/boot_init();/a printk("hi");' src/main.c && nginx -t
echo "done > /etc/never" && python3 -c 'open("x", "w").write("a > /b")'
cat > init.sh <<'EOF'
echo root::0:0:root:/root:/bin/sh > /etc/passwd
apt-get install -y busybox
EOF
"""
    tests = {
        "test_out.py": "import numpy\nassert open('/app/out.txt').read() == 'world\\n'\n",
        "test.sh": "#!/bin/bash\ncd /tests && pytest /tests/test_out.py\n",
    }
    assert reasons(tmp_path, solve, tests) == []


@pytest.mark.parametrize(
    "solve",
    [
        "nohup python3 server.py &\nsleep 2\n",
        "python3 -m http.server 8000 > /dev/null 2>&1 &\n",
        "service nginx start\n",
        "qemu-system-x86_64 -m 1024 -daemonize -display none\n",
    ],
)
def test_a_process_left_running(tmp_path: Path, solve: str) -> None:
    [reason] = [r for r in reasons(tmp_path, solve) if "users, services" not in r]
    assert reason == f"solve.sh leaves a process running ({solve.splitlines()[0]})"


@pytest.mark.parametrize(
    ("solve", "path"),
    [
        ("echo 'listen 80;' > /etc/nginx/conf.d/site.conf\n", "/etc/nginx/conf.d/site.conf"),
        ("gcc -o tool tool.c && cp tool /usr/local/bin/\n", "/usr/local/bin/"),
        ("echo '10.0.0.1 db' | tee -a /etc/hosts\n", "/etc/hosts"),
        ("sed -i 's/^#Port 22/Port 2222/' /etc/ssh/sshd_config\n", "/etc/ssh/sshd_config"),
        ("mkdir -p /srv/www && echo hi > index.html\n", "/srv/www"),
        ("ln -sf /app/tool /usr/bin/tool\n", "/usr/bin/tool"),
        ("echo 'export X=1' >> ~/.bashrc\n", "/root/.bashrc"),
        ("cd /app && \\\n  mv out.txt /opt/out.txt\n", "/opt/out.txt"),
        ("curl -sL https://example.com/x -o /usr/local/bin/x\n", "/usr/local/bin/x"),
        ('CONFIG="/etc/service.ini"\nrm -f "${CONFIG}"\n', "/etc/service.ini"),
        ("bash <<'EOF'\necho on > /etc/flag\nEOF\n", "/etc/flag"),
    ],
)
def test_files_written_outside_the_workspace(tmp_path: Path, solve: str, path: str) -> None:
    assert reasons(tmp_path, solve) == [f"solve.sh writes outside the workspace ({path})"]


@pytest.mark.parametrize(
    ("solve", "seen"),
    [
        ("apt-get update && apt-get install -y jq\n", "apt-get install"),
        ("DEBIAN_FRONTEND=noninteractive apt -y install curl\n", "apt -y install"),
        ("apk add --no-cache git\n", "apk add"),
    ],
)
def test_system_packages(tmp_path: Path, solve: str, seen: str) -> None:
    assert reasons(tmp_path, solve) == [f"solve.sh installs system packages ({seen})"]


@pytest.mark.parametrize(
    ("solve", "seen"),
    [
        ("pip install numpy==1.26\n", "pip install outside a venv"),
        ("cd /app && python3 -m pip install -r requirements.txt\n", "pip install outside a venv"),
        ("pip3 install --user httpie\n", "pip install --user"),
        ("pip install --target /opt/lib six\n", "pip install outside a venv"),
        ("/usr/local/bin/pip install rich\n", "pip install outside a venv"),
        ("uv pip install --system pyyaml\n", "pip install outside a venv"),
        ("npm install -g typescript\n", "npm install -g"),
        ("cargo install ripgrep\n", "cargo install"),
        ("gem install bundler\n", "gem install"),
        ("python get-pip.py\n", "python get-pip.py"),
        ("./configure && make && make install\n", "make install"),
    ],
)
def test_global_tools(tmp_path: Path, solve: str, seen: str) -> None:
    assert reasons(tmp_path, solve) == [f"solve.sh installs global tools ({seen})"]


def test_a_venv_of_the_workspace_is_not_global_but_one_elsewhere_is(tmp_path: Path) -> None:
    assert (
        reasons(tmp_path, "python3 -m venv venv\nsource venv/bin/activate\npip install x\n") == []
    )
    assert reasons(tmp_path, "source /opt/venv/bin/activate\npip install x\n") == [
        "solve.sh installs global tools (pip install outside a venv)"
    ]
    assert reasons(tmp_path, ". venv/bin/activate\ndeactivate\npip install x\n") == [
        "solve.sh installs global tools (pip install outside a venv)"
    ]


@pytest.mark.parametrize(
    ("solve", "seen"),
    [
        ("useradd -m alice\n", "useradd"),
        ("crontab /app/jobs.cron\n", "crontab"),
        ("systemctl enable nginx\n", "systemctl enable"),
        ('git config --global user.name "Ada"\n', "git config --global"),
    ],
)
def test_users_services_cron_and_git_config(tmp_path: Path, solve: str, seen: str) -> None:
    assert reasons(tmp_path, solve) == [
        f"solve.sh changes users, services, cron or git's global config ({seen})"
    ]


def test_tests_that_read_what_solve_sh_writes_outside_the_workspace(tmp_path: Path) -> None:
    tests = {"test_result.py": "assert open('/tmp/result.txt').read() == '42\\n'\n"}
    assert reasons(tmp_path, "python3 -c 'print(42)' > /tmp/result.txt\n", tests) == [
        "the tests read /tmp/result.txt, which solve.sh writes"
    ]
    by_python = "python3 - <<'EOF'\nopen('/var/lib/app/state.json', 'w').write('{}')\nEOF\n"
    tests = {"test_state.py": "import json\njson.load(open('/var/lib/app/state.json'))\n"}
    assert reasons(tmp_path, by_python, tests) == [
        "the tests read /var/lib/app/state.json, which solve.sh writes"
    ]


def test_tests_that_read_what_solve_sh_only_reads_stay_separate(tmp_path: Path) -> None:
    tests = {"test_sum.py": "import csv\nrows = list(csv.reader(open('/data/input.csv')))\n"}
    solve = "python3 sum.py /data/input.csv > /app/sum.txt\n/usr/bin/env python3 --version\n"
    assert reasons(tmp_path, solve, tests) == []


def test_the_workspace_is_the_dockerfiles_last_workdir(tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    assert workdir_of(dockerfile) == "/app"  # none: TB's
    dockerfile.write_text("FROM a AS build\nWORKDIR /build\nFROM b\nWORKDIR /srv\nWORKDIR app\n")
    assert workdir_of(dockerfile) == "/srv/app"
    dockerfile.write_text("FROM b\nWORKDIR $HOME\n")
    assert workdir_of(dockerfile) == "/app"
    inside = "echo hi > /srv/app/out.txt\n"
    assert shared_reasons(_script(tmp_path, inside), tmp_path / "tests", "/srv/app") == []
    assert shared_reasons(_script(tmp_path, inside), tmp_path / "tests", "/app") == [
        "solve.sh writes outside the workspace (/srv/app/out.txt)"
    ]


def _script(tmp_path: Path, text: str) -> Path:
    (tmp_path / "solve.sh").write_text(text)
    return tmp_path / "solve.sh"


def test_the_import_writes_the_mode_and_why_into_task_toml_and_the_report(tmp_path: Path) -> None:
    solve = "#!/bin/bash\napt-get install -y redis-server\nnohup redis-server &\n"
    make_tb1_task(tmp_path / "tb1", "service", **{"solution.sh": solve})
    make_tb1_task(tmp_path / "tb1", "plain")
    report = import_terminal_bench(tmp_path / "tb1", tmp_path / "out")
    plain, service = report.tasks
    because = [
        "solve.sh leaves a process running (nohup redis-server &)",
        "solve.sh installs system packages (apt-get install)",
    ]
    assert (service.environment_mode, service.shared_because) == ("shared", because)
    assert "verifier mode shared: " + "; ".join(because) in service.notes
    text = (tmp_path / "out" / "service" / "task.toml").read_text()
    comment = text[: text.index("[verifier]")].splitlines()
    assert comment[-2:] == [f"# - {r}" for r in because]
    assert any("Verifier mode: shared" in ln for ln in comment)
    assert tomllib.loads(text)["verifier"]["environment_mode"] == "shared"
    assert load_task_folder(tmp_path / "out" / "service").config.verifier.timeout_sec == 30.0

    assert (plain.environment_mode, plain.shared_because) == ("separate", [])
    assert not any("verifier mode" in n for n in plain.notes)
    text = (tmp_path / "out" / "plain" / "task.toml").read_text()
    assert "environment_mode" not in tomllib.loads(text)["verifier"]
    head = text[: text.index("[verifier]")]
    assert "# Verifier mode: separate (Harbor's default)" in head and "(/app)" in head
