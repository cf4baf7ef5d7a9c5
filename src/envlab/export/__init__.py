"""Exports of a run for trainers: ``sft``, ``dpo``, ``grpo``, ``tokens`` and ``verl`` rows (JSON
Lines or Parquet), each from the model's view of its messages (what the chat template was given),
and the token-exactness check of a run's token views (docs/export.md).

Imports only ``core``, ``runs`` and the standard library; pyarrow (Parquet), transformers (a
tokenizer directory) and the embedded engine are imported when an export needs them.
"""

from envlab.export.check import (
    Drift,
    DriftReport,
    EmbeddedRenderer,
    Renderer,
    TokenizerRenderer,
    check_episode,
    check_run,
    first_prompt,
    renderer_for,
)
from envlab.export.empty import EmptyExportError
from envlab.export.export import (
    ExportOptions,
    ExportReport,
    TokenDriftError,
    export_run,
)
from envlab.export.formats import FORMATS, Format
from envlab.export.groups import DEFAULT_EPS, Group, RunScan, scan_run
from envlab.export.trainers import (
    SKYRL_FIELDS,
    SLIME_FIELDS,
    skyrl_generator_output,
    slime_sample_fields,
)
from envlab.export.verl import VERL_COLUMNS, verl_row
from envlab.export.views import ModelView, ViewKind, model_view, view_kind

__all__ = [
    "DEFAULT_EPS",
    "FORMATS",
    "SKYRL_FIELDS",
    "SLIME_FIELDS",
    "VERL_COLUMNS",
    "Drift",
    "DriftReport",
    "EmbeddedRenderer",
    "EmptyExportError",
    "ExportOptions",
    "ExportReport",
    "Format",
    "Group",
    "ModelView",
    "Renderer",
    "RunScan",
    "TokenDriftError",
    "TokenizerRenderer",
    "ViewKind",
    "check_episode",
    "check_run",
    "export_run",
    "first_prompt",
    "model_view",
    "renderer_for",
    "scan_run",
    "skyrl_generator_output",
    "slime_sample_fields",
    "verl_row",
    "view_kind",
]
