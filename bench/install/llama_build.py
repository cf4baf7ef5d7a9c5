"""llama-cpp-python's source build: how long each set of ``CMAKE_ARGS`` takes, and whether the
lighter build generates as fast and still does what envlab needs.

``envlab[local]`` builds ``llama-cpp-python==0.3.36`` from its sdist. Its ``CMakeLists.txt`` builds
libllama + ggml (what envlab loads), libllama-common (forced ON by the package, so not skippable
with ``-D``) and, unless ``-DLLAVA_BUILD=OFF``, the multimodal library libmtmd (envlab never
loads it: ``llama_cpp.mtmd_cpp`` is imported only by the llava-style chat handlers). llama.cpp's
tests, examples, tools and server default to OFF when it is a subproject, as it is here: the
``configure`` step below proves it by hashing the build commands of each variant (same hash:
the same build, so it is not timed again).

Steps, one after another (never two builds at once):

1. ``pip download`` the sdist and the build backend once (download time is not counted);
2. per variant: cmake configure only, count and hash the build commands;
3. per distinct variant: time ``pip wheel --no-deps --no-cache-dir --no-index`` from the local
   sdist, with ``os.getloadavg()`` before and after (the machine may be shared);
4. per wheel, and for the llama_cpp already installed in this venv: unpack it, put it first on
   ``PYTHONPATH`` in a subprocess of this Python, and time greedy generation (raw
   ``Llama.generate`` and envlab's ``LlamaCppEngine.chat`` with logprobs and a tool), rounds
   interleaved so a change of load hits every build alike.

    python bench/install/llama_build.py          # everything (15-20 CPU-minutes a build)
    python bench/install/llama_build.py --variants baseline,no-mtmd
    python bench/install/llama_build.py --skip-build           # reuse the wheels in --work
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

VERSION = "0.3.36"
BASE = "-DGGML_NATIVE=OFF"
VARIANTS: dict[str, str] = {
    "baseline": BASE,
    "no-mtmd": f"{BASE} -DLLAVA_BUILD=OFF",
    # real options of vendor/llama.cpp, already OFF in a subproject build (checked by configure)
    "no-mtmd+explicit-off": (
        f"{BASE} -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "
        "-DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_APP=OFF"
    ),
}


def sh(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def fetch(work: Path) -> tuple[Path, Path]:
    """The sdist and a wheelhouse with its build backend, downloaded once."""
    sdist_dir, wheelhouse = work / "sdist", work / "wheelhouse"
    sdists = sorted(sdist_dir.glob(f"llama_cpp_python-{VERSION}.tar.gz"))
    if not sdists:
        pip = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:"]
        sh([*pip, f"llama-cpp-python=={VERSION}", "-d", str(sdist_dir)])
        sdists = sorted(sdist_dir.glob("*.tar.gz"))
    if not any(wheelhouse.glob("scikit_build_core-*.whl")):
        pip = [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheelhouse)]
        sh([*pip, "scikit-build-core>=0.9.2"])
    return sdists[0], wheelhouse


def configure(sdist: Path, work: Path, name: str, cmake_args: str) -> dict[str, Any]:
    """cmake configure only: how many build commands, and a hash of them (paths masked)."""
    src = work / "src" / f"llama_cpp_python-{VERSION}"
    if not src.is_dir():
        (work / "src").mkdir(parents=True, exist_ok=True)
        sh(["tar", "xzf", str(sdist), "-C", str(work / "src")])
    build = Path(tempfile.mkdtemp(prefix=f"cfg-{name}-", dir=work))
    try:
        sh(
            [
                "cmake",
                "-S",
                str(src),
                "-B",
                str(build),
                "-G",
                "Ninja",
                "-DCMAKE_BUILD_TYPE=Release",
                *cmake_args.split(),
            ]
        )
        cmds = sh(["ninja", "-C", str(build), "-t", "commands", "all"]).stdout
    finally:
        shutil.rmtree(build, ignore_errors=True)
    lines = [ln.replace(str(build), "BUILD") for ln in cmds.splitlines() if ln.strip()]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    mtmd = sum("mtmd" in ln.split(" -o ")[-1] for ln in lines if " -o " in ln)
    return {"commands": len(lines), "mtmd_commands": mtmd, "hash": digest}


def build(sdist: Path, wheelhouse: Path, out: Path, cmake_args: str) -> dict[str, Any]:
    """Time one ``pip wheel`` from the local sdist (no index: nothing is downloaded)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "CMAKE_ARGS": cmake_args}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-cache-dir",
        "--no-index",
        "--find-links",
        str(wheelhouse),
        "-w",
        str(out),
        str(sdist),
    ]
    load_before, ru0 = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True)
    seconds = time.perf_counter() - t0
    load_after, ru1 = os.getloadavg(), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    if proc.returncode != 0:
        sys.exit(f"build failed ({cmake_args}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    wheel = next(out.glob("*.whl"))
    return {
        "seconds": round(seconds, 1),
        "cpu_seconds": round(cpu, 1),  # user+sys of pip and every compiler: load-independent
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "wheel": str(wheel),
        "wheel_mb": round(wheel.stat().st_size / 2**20, 1),
        "libs": sorted(
            n
            for n in zipfile.ZipFile(wheel).namelist()
            if re.search(r"llama_cpp/lib/[^/]+\.so$", n)
        ),
    }


GEN_CODE = r"""
import json, math, sys, time
import llama_cpp
from llama_cpp import Llama
from envlab.models.llamacpp import LlamaCppEngine
from envlab.models.weights import smollm2_path
from envlab.models.wire import ChatMessage, ChatRequest

runs, tokens, threads = (int(a) for a in sys.argv[1:4])
path = str(smollm2_path())
llm = Llama(model_path=path, n_ctx=2048, n_threads=threads, n_threads_batch=threads,
            verbose=False, seed=0)
prompt = llm.tokenize(b"Write a short story about a robot learning to paint.")
def greedy(n):
    got = 0
    for _ in llm.generate(prompt, temp=0.0, top_k=1, reset=True):
        got += 1
        if got >= n:
            return got
greedy(16)  # warm-up
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(runs):
    greedy(tokens)
raw = runs * tokens / (time.perf_counter() - t0)
raw_cpu = runs * tokens / (time.process_time() - c0)
del llm

engine = LlamaCppEngine(path, n_ctx=2048, n_threads=threads)
tool = {"type": "function", "function": {"name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "number"},
        "b": {"type": "number"}}, "required": ["a", "b"]}}}
req = ChatRequest(messages=[ChatMessage(role="user", content="What is 2 + 3?")], tools=[tool],
                  temperature=0.0, max_tokens=tokens, logprobs=True, top_logprobs=2,
                  ignore_eos=True)
engine.chat(req.model_copy(update={"max_tokens": 8}))  # warm-up
t0, c0 = time.perf_counter(), time.process_time()
for _ in range(runs):
    reply = engine.chat(req)
chat = runs * tokens / (time.perf_counter() - t0)
chat_cpu = runs * tokens / (time.process_time() - c0)
choice = reply.choices[0]
lps = [t.logprob for t in choice.logprobs.content]
ok = (len(choice.token_ids) == tokens and len(lps) == tokens
      and all(math.isfinite(x) and x <= 0 for x in lps)
      and all(len(t.top_logprobs) == 2 for t in choice.logprobs.content)
      and bool(reply.prompt_token_ids))
libs = sorted({ln.split()[-1] for ln in open("/proc/self/maps") if "libllama.so" in ln
               or "libmtmd" in ln})
print(json.dumps({"raw_tps": raw, "chat_tps": chat, "raw_tpcpu": raw_cpu, "chat_tpcpu": chat_cpu,
                  "features_ok": ok,
                  "llama_cpp": llama_cpp.__file__, "libs": libs}))
"""


def unpack(wheel: Path, into: Path) -> Path:
    shutil.rmtree(into, ignore_errors=True)
    zipfile.ZipFile(wheel).extractall(into)
    for so in into.rglob("*.so*"):
        so.chmod(0o755)
    return into


def gen_once(site: Path | None, runs: int, tokens: int, threads: int) -> dict[str, Any]:
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = f"{site}{os.pathsep}{env.get('PYTHONPATH', '')}".rstrip(os.pathsep)
    cmd = [sys.executable, "-c", GEN_CODE, str(runs), str(tokens), str(threads)]
    proc = subprocess.run(cmd, env=env, text=True, capture_output=True)
    if proc.returncode != 0:
        sys.exit(f"generation failed ({site}):\n{proc.stderr[-3000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    if site is not None and not got["llama_cpp"].startswith(str(site)):
        sys.exit(f"{site}: imported {got['llama_cpp']}, not the unpacked wheel")
    return got


def generation(builds: dict[str, Path | None], work: Path, args: argparse.Namespace) -> dict:
    sites = {
        name: None if whl is None else unpack(whl, work / "unpacked" / name)
        for name, whl in builds.items()
    }
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in sites}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, site in sites.items():  # interleaved: drift in load hits every build alike
            rounds[name].append(gen_once(site, args.runs, args.tokens, args.threads))
    out = {}
    for name, rs in rounds.items():
        out[name] = {
            "raw_tps": round(statistics.median(r["raw_tps"] for r in rs), 1),
            "chat_tps": round(statistics.median(r["chat_tps"] for r in rs), 1),
            "raw_tpcpu": round(statistics.median(r["raw_tpcpu"] for r in rs), 1),
            "chat_tpcpu": round(statistics.median(r["chat_tpcpu"] for r in rs), 1),
            "features_ok": all(r["features_ok"] for r in rs),
            "libs": rs[-1]["libs"],
        }
    out["_load"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in os.getloadavg()],
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/envlab-llama-build"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--skip-build", action="store_true", help="reuse results.json's wheels")
    ap.add_argument("--runs", type=int, default=3, help="completions per round")
    ap.add_argument("--tokens", type=int, default=128, help="tokens per completion")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    ap.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1: no spin-waits)")
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    results_file = work / "results.json"
    results = json.loads(results_file.read_text()) if results_file.exists() else {}
    names = [n for n in args.variants.split(",") if n]
    sdist, wheelhouse = fetch(work)
    print(f"machine: {os.cpu_count()} cpus, load {os.getloadavg()}", flush=True)

    timed: dict[str, str] = {}  # command hash -> the variant whose build was timed
    for name in names:
        entry = results.setdefault(name, {})
        entry["cmake_args"] = VARIANTS[name]
        entry["configure"] = configure(sdist, work, name, VARIANTS[name])
        digest = entry["configure"]["hash"]
        print(f"{name:24} configure: {entry['configure']}", flush=True)
        if digest in timed:
            entry["same_build_as"] = timed[digest]
            continue
        timed[digest] = name
        if not args.skip_build or "build" not in entry:
            entry["build"] = build(sdist, wheelhouse, work / "wheels" / name, VARIANTS[name])
        print(f"{name:24} build: {entry['build']}", flush=True)
        results_file.write_text(json.dumps(results, indent=2))

    base = results.get("baseline", {}).get("build", {})
    print("\nvariant                  wall_s ratio   cpu_s ratio  load(1m)      cmds  CMAKE_ARGS")
    for name in names:
        e = results[name]
        b = results[e.get("same_build_as", name)]["build"]
        wall = f"{b['seconds'] / base['seconds']:.2f}" if base else "-"
        cpu = f"{b['cpu_seconds'] / base['cpu_seconds']:.2f}" if base else "-"
        same = f" (= {e['same_build_as']})" if "same_build_as" in e else ""
        print(
            f"{name:24} {b['seconds']:6.0f} {wall:>5} {b['cpu_seconds']:7.0f} {cpu:>5}  "
            f"{b['load_before'][0]:4.1f}->{b['load_after'][0]:4.1f}  "
            f"{e['configure']['commands']:5}  {e['cmake_args']}{same}"
        )

    builds: dict[str, Path | None] = {"installed": None}
    builds |= {n: Path(results[n]["build"]["wheel"]) for n in names if "build" in results[n]}
    gen = generation(builds, work, args)
    results["_generation"] = gen
    results_file.write_text(json.dumps(results, indent=2))
    ref = gen["installed"]
    print(
        f"\ngeneration: {args.rounds} rounds x {args.runs} x {args.tokens} greedy tokens, "
        f"{args.threads} threads, load {gen['_load']['before'][0]} -> {gen['_load']['after'][0]}"
    )
    print("tok/s: per wall second; tok/cpu-s: per CPU second of the process (less load-bound;")
    print("with several threads it counts ggml's spin-waits too, so --threads 1 is the cleanest)")
    print("build                 raw tok/s ratio tok/cpu-s ratio  chat tok/s ratio tok/cpu-s ratio")
    for name, g in gen.items():
        if name.startswith("_"):
            continue
        cells = "".join(
            f" {g[k]:9.1f} {g[k] / ref[k]:5.2f}"
            for k in ("raw_tps", "raw_tpcpu", "chat_tps", "chat_tpcpu")
        )
        libs = ", ".join(Path(x).name for x in g["libs"])
        print(f"{name:21}{cells}  {'ok' if g['features_ok'] else 'FAILED'}  {libs}")


if __name__ == "__main__":
    main()
