"""The sink host: the built-in sinks that only report (TensorBoard, MLflow, a webhook, the CSV
tables) run in a process of their own, fed from the run's metrics.jsonl, so their work (the import
of mlflow, a second of CPU; a protocol buffer per TensorBoard event; a CSV row per step) never
takes the run's interpreter from parsing.

Why a process and not a thread: Python runs one thread at a time, so a sink thread's CPU is taken
from parsing, however it is paced (bench/every_sink.py (b): every sink in the run parsed a quarter
of what JSONL alone parses; the CSV tables alone, inline, cost a fifth), while a training seldom
leaves every core busy. The JSONL file is complete and written anyway (C-formatted), so the host
reads it instead of being sent the records: nothing is copied twice.

The trade-off, in one sentence: each hosted sink keeps a threaded sink's contract in the run, not
an inline one's: its own thread and a queue of `sinks.queue` records; under a flood it cannot
keep up with (in its share of a core the host decodes ~25k records/s; TensorBoard and MLflow
write fewer), what does not fit is dropped and counted, never waited for; at the end what it
holds is written within `sinks.close_timeout`. So the CSV tables, complete whatever the rate when they ran inline, may now
miss rows of a flood (counted in the summary: `dropped`); metrics.jsonl keeps every record, and
`sinks.host: off` gives the old contract back. No training prints at that rate for long.

The modules: wire.py (the start message, the control lines, the counts, the log records), follower.py (whole lines
of a growing file -> events), main.py (the host's loop: `python -m trainvisor.sinks.host`),
handle.py (the run side: spawn, tell, wait for the counts; each hosted sink as the summary sees it).

What stays in the run: JSONL, stats, prometheus (it answers from the run's live status; its
per-record work is in C), callbacks, stop rules, and every object a caller passes or an entry
point registers (it may not be picklable, or may expect the pipeline thread)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...config import SinksConfig

__all__ = ["HOSTABLE", "hosted_names"]

# The built-in sinks that only report: they need nothing of the run but its records.
HOSTABLE = frozenset({"tensorboard", "mlflow", "webhook", "csv", "caffe-csv"})


def hosted_names(cfg: "SinksConfig") -> tuple[str, ...]:
    """The names of `sinks.use` the host runs: none with `sinks.host: off`; with `auto`, the
    hostable ones when there is one and the C JSONL formatter is built (the file is then
    cheap to write: without it the run pays for every record's text in Python, which is what
    the host would save); with `on`, the hostable ones whatever the build."""
    mode = getattr(cfg, "host", "off")
    names = tuple(n for n in cfg.use if n in HOSTABLE)
    if mode == "off" or not names:
        return ()
    if mode == "auto":
        from .. import jsonl

        if jsonl._c_format is None or not jsonl._FAST:
            return ()
    return names
