"""The sink host: the sinks that only report (TensorBoard, MLflow, a webhook, the CSV tables) run in
a process of their own, fed from the run's metrics.jsonl, so their work (above all the imports of
tensorboardX and mlflow, seconds of CPU) never holds the run's interpreter while it parses.

Why a process and not a thread: Python runs one thread at a time, and a sink thread's CPU is taken
from parsing (bench/every_sink.py (b): every sink in-process parsed a tenth of what JSONL alone
parses). The JSONL file is complete and written anyway (C-formatted), so the host reads it instead
of being sent the records: nothing is copied twice, and the file is the buffer under a flood
(nothing is dropped). The modules: wire.py (the start message, the control lines, the counts),
follower.py (whole lines of a growing file -> events), main.py (the host's loop: `python -m
trainvisor.sinks.host`), handle.py (the run side: spawn, tell, wait for the counts; each hosted
sink as the summary sees it).

What stays in the run: JSONL, stats, prometheus (it answers from the run's live status),
callbacks, stop rules, and every object a caller passes (it may not be picklable, or may expect
the pipeline thread)."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...config import SinksConfig

__all__ = ["HOSTABLE", "hosted_names"]

# The registered sinks that only report: they need nothing of the run but its records.
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
