"""The end-of-run summary: what a person wants to see when the training stops."""
from __future__ import annotations

import math
from typing import Optional

from .events import Metric, PHASE_TRAIN
from .pipeline import PipelineStats
from .sinks.stats import StatsSink

__all__ = ["format_summary"]

_LOSS_NAMES = ("total_loss", "loss")


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.6g}"


def format_summary(
    stats: PipelineStats,
    counts: StatsSink,
    *,
    exit_code: Optional[int] = None,
    faults: Optional[dict] = None,
    metrics_path: Optional[str] = None,
    run_dir: Optional[str] = None,
) -> str:
    lines = ["", "trainvisor summary"]
    if exit_code is not None:
        lines.append(f"  exit code      {exit_code}")
    lines.append(f"  lines parsed   {stats.lines}" + (f" ({stats.truncated_lines} cut at the line cap)" if stats.truncated_lines else ""))
    lines.append(f"  metrics        {counts.metrics}")
    lines.append(f"  checkpoints    {counts.checkpoints} announced")
    last: dict[tuple[str, str], Metric] = counts.last
    for name in _LOSS_NAMES:
        m = last.get((PHASE_TRAIN, name))
        if m is not None:
            lines.append(f"  last {name:<10} {_fmt(m.value)} at iteration {m.iteration}")
            break
    for (phase, name), m in sorted(last.items()):
        if phase != PHASE_TRAIN:
            lines.append(f"  {phase} {name:<10} {_fmt(m.value)} (last, iteration {m.iteration})")
    if faults:
        for comp, n in sorted(faults.items()):
            lines.append(f"  FAILED         {comp}: {n} time(s) (see the run log)")
    if metrics_path:
        lines.append(f"  metrics file   {metrics_path}")
    if run_dir:
        lines.append(f"  run directory  {run_dir}")
    return "\n".join(lines)
