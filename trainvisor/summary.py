"""The end-of-run summary: what a person wants to see when the training stops."""
from __future__ import annotations

import math
from typing import Iterable, Optional

from .events import PHASE_TRAIN, Metric, Notice
from .secrets import mask_text
from .stream.pipeline import PipelineStats

__all__ = ["format_summary", "format_replay_summary"]

_LOSS_NAMES = ("total_loss", "loss")


def _fmt(v: float) -> str:
    return "nan" if math.isnan(v) else f"{v:.6g}"


def format_summary(summary) -> str:
    """The text `trainvisor run --summary` prints for a `RunSummary`."""
    s = summary
    lines = ["", "trainvisor summary", f"  exit code      {s.exit_code}"]
    lines.append(f"  lines parsed   {s.lines}" + (f" ({s.truncated_lines} cut at the line cap)" if s.truncated_lines else ""))
    lines.append(f"  metrics        {s.metrics}")
    lines += _unparsed_lines(getattr(s, "unparsed_bytes", 0), getattr(s, "binary_bytes", 0))
    lines.append(f"  checkpoints    {s.checkpoints_complete} complete")
    restarts = getattr(s, "restarts", ())
    if restarts:  # each crash and what the next attempt resumed from
        lines.append(f"  restarts       {len(restarts)} ({s.attempts} attempts)")
        lines += [f"    {r}" for r in restarts]
    if getattr(s, "stop_rule", None) is not None:
        said = s.stop_rule.describe()
        # A rule may hold on the last lines, parsed after the child had ended on its own.
        lines.append(f"  STOPPED        {said}" if s.stop_reason == said else
                     f"  STOP RULE      {said} (the training had already ended or was stopping)")
    table = getattr(s, "table", ())
    lines += _table_lines(table) if table else _metric_lines(s.last_metrics)
    for u in getattr(s, "destinations", ()) or ((s.uploads,) if s.uploads is not None else ()):
        lines += _upload_lines(u)  # one block per destination
    lines += _sink_lines(getattr(s, "sinks", ()))
    followed = getattr(s, "followed", None)
    if followed is not None:
        lines.append(f"  followed       {followed.rotations} rotation(s), {followed.truncations} truncation(s) "
                     f"({followed.waiter})")
    for f in s.faults:
        lines.append(f"  FAILED         {f.component}: {f.count} time(s) (see the run log)")
    lines += _notice_lines(s.notices)
    lines += [f"  WARNING        {w}" for w in s.warnings]
    lines += [f"  ABANDONED      {a}" for a in getattr(s, "abandoned", ())]
    if s.metrics_path:
        lines.append(f"  metrics file   {s.metrics_path}")
    lines.append(f"  run directory  {s.run_dir}")
    return mask_text("\n".join(lines))  # a warning or an upload error may quote a URL with its password


def format_replay_summary(stats: PipelineStats, counts, *, metrics_path: Optional[str] = None) -> str:
    """The text `trainvisor replay --summary` prints: the same lines, without a process or uploads."""
    lines = ["", "trainvisor summary"]
    lines.append(f"  lines parsed   {stats.lines}" + (f" ({stats.truncated_lines} cut at the line cap)" if stats.truncated_lines else ""))
    lines.append(f"  metrics        {counts.metrics}")
    lines.append(f"  checkpoints    {counts.checkpoints} announced")
    lines += _metric_lines(counts.last.values())
    lines += _notice_lines(getattr(counts, "notices", {}).values())
    if metrics_path:
        lines.append(f"  metrics file   {metrics_path}")
    return "\n".join(lines)


def _metric_lines(last_metrics: Iterable[Metric]) -> list[str]:
    last = {(m.phase, m.name): m for m in last_metrics}
    lines = []
    for name in _LOSS_NAMES:
        m = last.get((PHASE_TRAIN, name))
        if m is not None:
            lines.append(f"  last {name:<10} {_fmt(m.value)} at iteration {m.iteration}")
            break
    for (phase, name), m in sorted(last.items()):
        if phase != PHASE_TRAIN:
            lines.append(f"  {phase} {name:<10} {_fmt(m.value)} (last, iteration {m.iteration})")
    return lines


DELETED_NAMES = 12
"""Names of sets deleted from the store the printed summary shows (the last ones); all of them are
in `RunSummary.uploads.deleted`."""

TABLE_ROWS = 24
"""Rows the printed table shows at most (a detection log has dozens of metrics); the rest are
in `RunSummary.table`, and the last line says how many."""


def _table_lines(rows) -> list[str]:
    """Each metric's last value and its best, with their steps (`MetricRow`s)."""
    def label(r) -> str:
        net = f"#{r.test_net}" if r.test_net else ""
        return f"{r.phase}{net}/{r.name}"

    def at(v: float, step) -> str:
        return _fmt(v) + ("" if step is None else f" @ {step:g}")

    width = min(28, max(len(label(r)) for r in rows[:TABLE_ROWS]))
    lines = ["  last / best    (at step: iteration, else epoch)"]
    for r in rows[:TABLE_ROWS]:
        text = f"    {label(r):<{width}}  {at(r.last, r.last_step):<22}"
        if r.best is not None:
            text += f"  best {at(r.best, r.best_step)}"
        lines.append((text + ("  (running values only)" if r.running else "")).rstrip())
    if len(rows) > TABLE_ROWS:
        lines.append(f"    ... and {len(rows) - TABLE_ROWS} more (RunSummary.table)")
    return lines


def _unparsed_lines(unparsed: int, binary: int) -> list[str]:
    """Output that was passed through but not parsed, said (never a silent gap in the metrics)."""
    lines = []
    if unparsed:
        lines.append(f"  NOT PARSED     {unparsed} bytes: parsing fell too far behind (they were passed through)")
    if binary:
        lines.append(f"  NOT PARSED     {binary} bytes that looked binary (passed through unchanged)")
    return lines


def _upload_lines(u) -> list[str]:
    """The destination's sets by outcome, then what its uploads cost in time when any were sent."""
    from .run.progress import throughput_text

    skipped = f", {u.sets_skipped} skipped (superseded)" if u.sets_skipped else ""
    lines = [f"  uploads        {u.destination}: {u.sets_verified} sets verified, {u.sets_pending} pending, "
             f"{u.sets_failed} failed{skipped} ({len(u.verified)} objects verified)"]
    if u.bytes_sent:
        lines.append(f"                 {throughput_text(u.bytes_sent, u.seconds, u.limiter_wait)}")
    if getattr(u, "deleted", ()):  # retention (--keep-last, --keep-best): the newest names
        more = f" ... and {len(u.deleted) - DELETED_NAMES} more" if len(u.deleted) > DELETED_NAMES else ""
        lines.append(f"  deleted from store {len(u.deleted)} set(s): {', '.join(u.deleted[-DELETED_NAMES:])}{more}")
    return lines


def _sink_lines(counts) -> list[str]:
    """One line per sink: its records written, and those it lost (dropped, failed) when any."""
    lines = []
    for c in counts:
        text = f"  sink {c.name:<9} {c.written} written"
        text += f", {c.dropped} dropped" if c.dropped else ""
        text += f", {c.failed} failed (see the run log)" if c.failed else ""
        text += " (still busy at the end: abandoned)" if c.abandoned else ""
        text += f"; {c.cpu_seconds:.1f} s CPU" if c.cpu_seconds >= 1 else ""  # when it is worth a look
        lines.append(text)
    return lines


def _notice_lines(notices: Iterable[Notice]) -> list[str]:
    return [f"  NOTICE         {n.message}" for n in notices]
