"""docs/train-gpu.md's recipe as a function, for the CUDA test (tests/train/test_served.py) and a
GPU machine: SmolLM2 from the embedded GGUF saved as a transformers folder, served by vLLM with
the sampled tokens' logprobs at the request's temperature, trained on ``triage`` on CUDA with the
weights pushed to the server after every step. Returns the figures the note records."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(folder: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    cmd = [
        "vllm", "serve", str(folder), "--host", "127.0.0.1", "--port", str(port),
        "--served-model-name", "smollm2", "--logprobs-mode", "processed_logprobs",
        "--gpu-memory-utilization", "0.3", "--enforce-eager",
    ]  # fmt: skip
    env = dict(os.environ, VLLM_SERVER_DEV_MODE="1")
    return subprocess.Popen(cmd, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _wait(url: str, proc: subprocess.Popen[bytes], log: Path, limit_s: float = 900) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        if proc.poll() is not None:
            raise RuntimeError(f"vllm serve exited {proc.returncode}: {log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return time.monotonic() - t0
        except httpx.HTTPError:
            pass
        time.sleep(2)
    raise RuntimeError(f"vllm serve not up after {limit_s}s: {log.read_text()[-3000:]}")


def run_recipe(work: Path, *, steps: int = 2) -> dict[str, Any]:
    import torch

    from envlab.envs.triage import TriageEnv
    from envlab.models.torch_engine import load_gguf
    from envlab.models.weights import smollm2_path
    from envlab.train.loop import TrainConfig, train
    from envlab.train.served import DiskReload, ServedLMLearner

    folder = work / "served"
    model, tok = load_gguf(smollm2_path())
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(folder, port, work / "vllm.log")
    try:
        up_s = _wait(f"{base}/health", proc, work / "vllm.log")
        sync = DiskReload.vllm(f"{base}/v1", folder)
        agent = {"max_tokens": 12, "max_turns": 1, "instructions": ""}
        learner = ServedLMLearner(
            model.to("cuda"), tok, base_url=f"{base}/v1", served_model="smollm2", sync=sync,
            temperature=0.7, train_layers=4, lr=3e-5, agent_kwargs=agent,
        )  # fmt: skip
        spec = TriageEnv()
        config = TrainConfig(steps=steps, groups_per_step=4, group_size=8, sync=True)
        t0 = time.monotonic()
        result = asyncio.run(
            train(
                spec,
                spec.tasks(n=64),
                learner,
                out_dir=work / "run",
                config=config,
                command=[sys.argv[0]],
            )
        )
        took = time.monotonic() - t0
    finally:
        proc.terminate()
        proc.wait(60)
    first = result.metrics[0]
    return {
        "server_up_s": round(up_s, 1),
        "train_s": round(took, 1),
        "first_ratio": first.learner["ratio_mean"],
        "reloads": len(sync.pushed),
        "rewards": [round(m.reward_mean, 3) for m in result.metrics],
        "learner_s": [round(m.learner_s, 2) for m in result.metrics],
        "cuda": torch.cuda.get_device_name(0),
    }


if __name__ == "__main__":
    import json
    import tempfile

    print(json.dumps(run_recipe(Path(tempfile.mkdtemp(prefix="envlab-gpu-")), steps=10), indent=2))
