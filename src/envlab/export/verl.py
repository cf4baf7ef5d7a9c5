"""``verl``: a run's tasks as verl's RL prompt dataset (one Parquet row per task).

The layout of verl's own data preprocessing, which its ``RLHFDataset`` reads (verl
``b178a3cd``, 2026-01-29: ``examples/data_preprocess/gsm8k.py`` writes the columns,
``verl/utils/dataset/rl_dataset.py`` reads ``prompt`` (``data.prompt_key``), ``extra_info``
(``index``, ``tools_kwargs``, ``interaction_kwargs``) and ``data_source``;
``verl/workers/reward_manager/naive.py`` hands ``data_source``,
``reward_model["ground_truth"]`` and ``extra_info`` to the reward function):

- ``data_source``: ``envlab:<env id>``, which selects the reward function (verl's
  ``reward_fn_key``);
- ``prompt``: the chat messages of the task's first model turn, the model's view (``views``);
  ``RLHFDataset`` renders it with ``apply_chat_template(prompt, add_generation_prompt=True)``;
- ``ability``: ``tool-use`` when the environment offered tools, else ``chat``;
- ``reward_model``: ``{"style": "rule", "ground_truth": <task id>}``. A run never stores a
  task's hidden answer (the grader keeps it), so the ground truth names the task, for a
  reward function that grades verl's rollouts with envlab;
- ``extra_info``: ``index`` (the row), ``split``, the task and environment ids, the tools the
  template received (JSON text, null when they are in the system prompt), the run's reward
  statistics of the task, and what rebuilds the run's task set (``env_config`` as JSON text,
  ``task_seed``, ``n_tasks``, ``task_set_hash``), which ``envlab.export.verl_reward`` grades
  verl's rollouts with.

verl samples its own rollouts from these prompts: the run's replies and rewards are not
training data here (``grpo``/``tokens`` are).
"""

from __future__ import annotations

import json
from typing import Any

from envlab.core import Trajectory
from envlab.export.groups import Group
from envlab.export.views import ModelView
from envlab.runs.info import RunInfo

VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")
"""The columns of verl's RL dataset (``examples/data_preprocess/gsm8k.py``)."""


def verl_row(
    traj: Trajectory,
    view: ModelView,
    group: Group,
    index: int,
    run: RunInfo,
    split: str = "train",
) -> dict[str, Any]:
    """The row of ``traj``'s task, from one of its episodes (all samples share the prompt)."""
    return {
        "data_source": f"envlab:{traj.env_id}",
        "prompt": view.prompt(),
        "ability": "tool-use" if traj.tools else "chat",
        "reward_model": {"style": "rule", "ground_truth": traj.task_id},
        "extra_info": {
            "index": index,
            "split": split,
            "task_id": traj.task_id,
            "group_id": traj.group_id,
            "env_id": traj.env_id,
            "env_hash": traj.env_hash,
            "tools": view.tools_json(),
            "run_reward_mean": group.mean,
            "run_samples": len(group.members),
            "dead_group": group.dead,
            "env_config": json.dumps(run.env_config, sort_keys=True),
            "task_seed": run.seed,
            "n_tasks": run.n_tasks,
            "task_set_hash": run.task_set_hash,
        },
    }
