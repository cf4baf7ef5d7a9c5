"""Exports of a run for trainers: ``sft``, ``dpo``, ``grpo`` and ``tokens`` rows (JSON Lines or
Parquet), and the token-exactness check of a run's token views (docs/export.md).

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
    renderer_for,
)
from envlab.export.export import (
    ExportOptions,
    ExportReport,
    TokenDriftError,
    export_run,
)
from envlab.export.formats import FORMATS, Format
from envlab.export.groups import DEFAULT_EPS, Group, RunScan, scan_run

__all__ = [
    "DEFAULT_EPS",
    "FORMATS",
    "Drift",
    "DriftReport",
    "EmbeddedRenderer",
    "ExportOptions",
    "ExportReport",
    "Format",
    "Group",
    "Renderer",
    "RunScan",
    "TokenDriftError",
    "TokenizerRenderer",
    "check_episode",
    "check_run",
    "export_run",
    "renderer_for",
    "scan_run",
]
