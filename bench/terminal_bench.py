"""Run ``envlab task check`` on every task of a directory of Terminal-Bench tasks; one row each.

    python bench/terminal_bench.py TB1_TASKS_DIR --out /tmp/tb1-run [--jobs 2] [--only a,b]

``TB1_TASKS_DIR`` holds TB1 folders (``task.yaml``, ``run-tests.sh``, ...): they are imported
with ``envlab task import terminal-bench`` into ``OUT/harbor`` (no hand edits), then each is
checked on its own (``--runs 1 --noop-runs 1``, images on) in a subprocess with a time limit.
``OUT/results/<task>.json`` keeps each check's JSON and ``OUT/summary.json`` the rows:
task, oracle reward, no-op reward, seconds, pass (oracle 1 and no-op 0) and the cause of a
failure as the check reported it. envlab ships none of the tasks: fetch them yourself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path


def _row(task: str, data: object, seconds: float, err: str) -> dict[str, object]:
    row: dict[str, object] = {"task": task, "seconds": round(seconds, 1), "pass": False}
    if not isinstance(data, list) or not data:
        row["cause"] = err[-800:] or "no result"
        return row
    check = data[0]
    oracle = check.get("oracle") or [{}]
    noop = check.get("noop") or [{}]
    row |= {
        "oracle": oracle[0].get("reward"),
        "noop": noop[0].get("reward"),
        "pass": bool(check.get("ok")),
        "mode": next((n for n in check.get("notes", []) if n.startswith("mode:")), ""),
        "verifier_mode": oracle[0].get("verifier_mode"),
        "cause": "; ".join(check.get("problems", []))[-1500:],
    }
    return row


async def _check(task: Path, out: Path, timeout: float) -> dict[str, object]:
    t0 = time.monotonic()
    argv = [sys.executable, "-m", "envlab.cli.main", "task", "check", str(task)]
    argv += ["--runs", "1", "--noop-runs", "1", "--concurrency", "2", "--json"]
    env = {**os.environ, "ENVLAB_IMAGES": "auto"}
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        stdout, stderr = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return _row(task.name, None, time.monotonic() - t0, f"check ran past {timeout:g} s")
    (out / f"{task.name}.json").write_bytes(stdout)
    (out / f"{task.name}.err").write_bytes(stderr[-20000:])
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        data = None
    return _row(task.name, data, time.monotonic() - t0, stderr.decode(errors="replace"))


_CAUSES = (
    (r"sidecar services \(([^)]*)\)", "sidecar services ({}): refused"),
    (r"FROM (\S+): envlab cannot build", "FROM {} cannot be built without Docker"),
    (r"docker_image = '([^']*)'", "docker_image {} cannot be built"),
    (
        r"Dockerfile:\d+: .*?(?:Could not resolve host:? '?|Failed to establish a new connection"
        r".*?/)([\w.-]+\.[a-z]{2,})",
        "needs the internet at build time ({})",
    ),
    (r"Looking in indexes: https?://([\w.-]+)", "needs the internet at build time ({})"),
    (
        r"Dockerfile:\d+: `RUN (?:wget|curl|git clone)[^`]*?https?://([\w.-]+)",
        "needs the internet at build time ({})",
    ),
    (r"needs the network \(([^)]*)\)", "grading needs the internet ({})"),
    (
        r"(?:Could not resolve host:? |resolve host |Name or service not known.*?host=')"
        r"([\w.-]+\.[a-z]{2,})",
        "needs the internet at run time ({})",
    ),
    (r"the agent changed the grader's programs \(([^)]*)\)", "grader's programs changed ({})"),
)


def classify(cause: str) -> str:
    """A named cause from a check's problem text (first match of the patterns above)."""
    import re

    for pattern, form in _CAUSES:
        m = re.search(pattern, cause, re.DOTALL)
        if m:
            return form.format(m.group(1)[:80])
    return cause.split("(", 1)[-1][:160] if cause else ""


def _detail(results: Path, task: str) -> str:
    """Everything a check said about a failing task: errors, grader failures, test output."""
    try:
        check = json.loads((results / f"{task}.json").read_text())[0]
    except (OSError, ValueError, IndexError, KeyError):
        return ""
    parts = list(check.get("problems", []))
    for row in [*check.get("oracle", []), *check.get("noop", [])]:
        parts += [(row.get("error") or {}).get("message", ""), row.get("grader_failed") or ""]
        parts.append(row.get("verifier_output_tail") or "")
        parts.append(row.get("agent_output_tail") or "")
    return "\n".join(p for p in parts if p)


def table(summary: Path) -> str:
    """The rows of ``summary.json`` as a Markdown table, with a named cause per failure."""
    rows = json.loads(summary.read_text())
    for r in rows:
        if not r["pass"]:
            r["cause"] = _detail(summary.parent / "results", r["task"]) or r.get("cause")
    out = ["| task | verifier | oracle | no-op | seconds | result |",
           "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for r in rows:
        what = "pass" if r["pass"] else classify(str(r.get("cause") or ""))
        out.append(f"| {r['task']} | {r.get('verifier_mode') or '-'} | {r.get('oracle')} | "
                   f"{r.get('noop')} | {r['seconds']} | {what.replace('|', '/')} |")  # fmt: skip
    return "\n".join(out)


def _prune(out: Path) -> int:
    """94 images need more disk than a laptop has: below 40 GB free, the layers no sandbox used
    for 30 minutes go, below 15 GB those unused for 10 (a running task touches its layers each
    time it makes a sandbox); the bases stay."""
    from envlab.sandbox.image.store import prune_layers

    freed = 0
    for free_gb, unused_s in ((40, 1800), (15, 600)):
        if shutil.disk_usage(out).free < free_gb << 30:
            freed += prune_layers(unused_s)
    return freed


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tasks", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=2400.0)
    ap.add_argument("--only", default="")
    ap.add_argument("--keep-layers", action="store_true", help="keep each task's layers")
    ap.add_argument("--table", action="store_true", help="print OUT/summary.json as Markdown")
    args = ap.parse_args()
    if args.table:
        print(table(args.out / "summary.json"))
        return
    harbor = args.out / "harbor"
    if not harbor.exists():
        cmd = [sys.executable, "-m", "envlab.cli.main", "task", "import", "terminal-bench"]
        proc = await asyncio.create_subprocess_exec(*cmd, str(args.tasks), "--out", str(harbor))
        await proc.wait()
    results = args.out / "results"
    results.mkdir(parents=True, exist_ok=True)
    only = set(filter(None, args.only.split(",")))
    tasks = sorted(p for p in harbor.iterdir() if p.is_dir() and (not only or p.name in only))
    gate = asyncio.Semaphore(args.jobs)
    rows: list[dict[str, object]] = []

    async def one(task: Path) -> None:
        async with gate:
            try:
                row = await _check(task, results, args.timeout)
                if not args.keep_layers:
                    row["pruned_mb"] = _prune(args.out) >> 20
            except Exception as e:  # one task's trouble (a full disk) is its row, not the run's
                row = {"task": task.name, "pass": False, "seconds": 0.0, "cause": repr(e)}
        rows.append(row)
        mark = "PASS" if row["pass"] else "fail"
        verifier = row.get("verifier_mode") or "-"
        print(f"{mark} {row['task']:40s} {verifier:9s} {row['seconds']:7.1f}s "
              f"{str(row.get('cause'))[:150]}", flush=True)  # fmt: skip
        summary = sorted(rows, key=lambda r: str(r["task"]))
        (args.out / "summary.json").write_text(json.dumps(summary, indent=1))

    await asyncio.gather(*(one(t) for t in tasks))
    passed = sum(1 for r in rows if r["pass"])
    print(f"{passed} of {len(rows)} tasks: oracle 1 and no-op 0")


if __name__ == "__main__":
    asyncio.run(main())
