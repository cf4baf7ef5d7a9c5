"""Run directories for the export tests, written with the real store, and a tokenizer built here.

The tokenizer is a byte-level BPE trained on the episodes' own text (``tokenizers``), wrapped in
``PreTrainedTokenizerFast`` with a ChatML chat template that renders tools and tool calls, and
saved to a directory: the "model's tokenizer" of these runs. Each episode's token view is made
the way the harness makes it (``_TokenLog``): turn k's prompt ids are what the messages before
reply k render to, and the reply's ids are its rendered text up to its end-of-turn token.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envlab.core import AgentSpec, Status, StepRecord, TokenView, Trajectory
from envlab.runs import RunInfo, TrajectoryStore, write_run_info

CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% if m['tool_calls'] %}{% for c in m['tool_calls'] %}<tool_call>{{ c['function']['name'] }}"
    " {{ c['function']['arguments'] }}</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                "required": ["a", "b"],
            },
        },
    }
]
AGENT = AgentSpec(name="tiny", model_id="tiny-local-bpe", harness="tool-calling/native")


def messages(task: int, answer: str) -> list[dict[str, Any]]:
    """An episode of task ``task`` (every sample gets the same prompt) ending with ``answer``."""
    call = {"id": "call_0", "type": "function"}
    call["function"] = {"name": "add", "arguments": json.dumps({"a": task, "b": 2})}
    return [
        {"role": "system", "content": "You add numbers with the tools."},
        {"role": "user", "content": f"What is {task} + 2? Answer with the number."},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_0", "name": "add", "content": str(task + 2)},
        {"role": "assistant", "content": answer},
    ]


def build_tokenizer(directory: Path) -> Any:
    """Train the tiny tokenizer on every message these runs can hold; save it to ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [CHAT_TEMPLATE, json.dumps(TOOLS)]
    for t in range(4):
        corpus += [json.dumps(m) for m in messages(t, str(t + 2)) + messages(t, "no idea")]
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|im_start|>", "<|im_end|>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tk.train_from_iterator(corpus, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<pad>", bos_token="<|im_start|>"
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(directory))
    return tok


def render(tok: Any, msgs: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
    text = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(tok.encode(text, add_special_tokens=False))


def token_view(tok: Any, msgs: list[dict[str, Any]], replies: list[int]) -> TokenView:
    """What ``_TokenLog`` records for these messages (model replies at ``replies``)."""
    full: list[int] = []
    view = TokenView()
    end = tok.convert_tokens_to_ids("<|im_end|>")
    for index in replies:
        prompt = render(tok, msgs[:index], TOOLS)
        assert prompt[: len(full)] == full, "the template does not extend the earlier turns"
        with_reply = render(tok, msgs[: index + 1], TOOLS)
        reply = with_reply[len(prompt) : with_reply.index(end, len(prompt)) + 1]
        extra = prompt[len(full) :] if full else []
        if not full:
            view.prompt_ids = prompt
        view.turn_starts.append(len(prompt))
        view.completion_ids += extra + reply
        view.loss_mask += [0] * len(extra) + [1] * len(reply)
        view.logprobs += [0.0] * len(extra) + [-0.5] * len(reply)
        full = prompt + reply
    return view


@dataclass(frozen=True)
class Ep:
    """One planned episode: its task, sample, reward (``None``: unscored) and status."""

    task: int
    sample: int
    reward: float | None
    status: Status = Status.OK


def trajectory(tok: Any, ep: Ep) -> Trajectory:
    msgs = messages(ep.task, str(ep.task + 2) if ep.reward else "no idea")
    scored = ep.status.scored
    steps = [StepRecord(index=0, message_index=2), StepRecord(index=1, message_index=4)]
    return Trajectory(
        episode_id=f"g{ep.task}-{ep.sample}",
        task_id=f"task-{ep.task}",
        group_id=f"g{ep.task}",
        sample_index=ep.sample,
        reward=ep.reward,
        status=ep.status,
        env_id="adder",
        env_hash="0" * 16,
        seed=ep.sample,
        agent=AGENT,
        messages=msgs if scored else msgs[:2],
        tools=TOOLS,
        steps=steps if scored else [],
        tokens=token_view(tok, msgs, [2, 4]) if scored else None,
        n_steps=2 if scored else 0,
    )


def write_run(directory: Path, trajs: list[Trajectory]) -> Path:
    """A run directory holding ``trajs`` in this order (a later record of an id wins)."""
    directory.mkdir(parents=True, exist_ok=True)
    info = RunInfo(
        command=["test"], envlab_version="0", env_id="adder", env_hash="0" * 16, agent=AGENT,
        seed=0, samples=4, n_tasks=4, task_set_hash="0", task_ids=[], concurrency=1,
        episode_config={}, created_at=time.time(),
    )  # fmt: skip
    write_run_info(directory, info)
    with TrajectoryStore(directory / "trajectories.jsonl") as store:
        for t in trajs:
            store.append(t)
    return directory


INFRA, ENV = Status.INFRA_ERROR, Status.ENV_ERROR
PLAN = [
    # group g0: rewards 1, 0, 1, 0.5 scored; an infra error and an env error dropped
    Ep(0, 0, 1.0), Ep(0, 1, 0.0), Ep(0, 2, 1.0), Ep(0, 3, None, INFRA), Ep(0, 4, None, ENV),
    Ep(0, 3, 0.5),  # sample 3 retried after its infra error: the later record wins
    # group g1: all 1.0 (dead); g2: one scored episode (dead), one infra error
    Ep(1, 0, 1.0), Ep(1, 1, 1.0), Ep(1, 2, 1.0),
    Ep(2, 0, 0.5), Ep(2, 1, None, INFRA),
    # group g3: 0 and 0.25 (a pair below a margin of 0.5)
    Ep(3, 0, 0.0), Ep(3, 1, 0.25),
]  # fmt: skip
