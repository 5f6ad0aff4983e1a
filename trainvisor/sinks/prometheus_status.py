"""The run's state as Prometheus families: what a dashboard or an alert asks of a training that
is not its own ("is it running, which attempt, is it still saying anything, are its checkpoints
reaching the store?"). Built from one `RunStatus` snapshot per scrape, so the families agree.

The child's state is a state set (`trainvisor_child_state{state="running"} 1`, the others 0): the
PromQL idiom for an enum, so `trainvisor_child_state{state="exited"} == 1` alerts without knowing
codes. Counters are totals over the run's attempts (Prometheus' `rate()` needs them monotonic).
"""
from __future__ import annotations

from typing import Any, Iterator

from ..status import CHILD_STATES, RunStatus

__all__ = ["status_families"]

_COUNTERS = (
    ("trainvisor_lines", "Lines of the training's output read and handed to the parser.", "lines"),
    ("trainvisor_records", "Records the parser gave (metrics, checkpoint announcements, notices).", "records"),
    ("trainvisor_parse_faults", "Failures of the parser, line hooks and inline sinks (each contained).", "faults"),
    ("trainvisor_checkpoints_complete", "Checkpoint sets found complete on disk.", "checkpoints_complete"),
    ("trainvisor_uploads_verified", "Checkpoint sets uploaded and verified in the store.", "uploads_verified"),
    ("trainvisor_uploads_failed", "Checkpoint sets whose upload failed for good.", "uploads_failed"),
    ("trainvisor_upload_bytes", "Bytes of checkpoint files sent to the store.", "upload_bytes"),
)


def status_families(status: RunStatus, names: list, values: list) -> Iterator[Any]:
    """The families of one snapshot; `names`/`values` are the sink's base labels (run id, user's)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    attempt = GaugeMetricFamily("trainvisor_attempt", "The attempt (child start) the run is on, from 1.",
                                labels=names)
    attempt.add_metric(values, status.attempt)
    yield attempt
    state = GaugeMetricFamily("trainvisor_child_state", "The training process's state: 1 for the current one.",
                              labels=names + ["state"])
    for s in CHILD_STATES:
        state.add_metric(values + [s], 1.0 if s == status.child else 0.0)
    yield state
    if status.exit_code is not None:
        code = GaugeMetricFamily("trainvisor_child_exit_code", "The last child's exit code (128+N: signal N).",
                                 labels=names)
        code.add_metric(values, status.exit_code)
        yield code
    if status.seconds_since_metric is not None:
        quiet = GaugeMetricFamily("trainvisor_seconds_since_metric",
                                  "Seconds since the newest metric was read (a hung training grows it).", labels=names)
        quiet.add_metric(values, status.seconds_since_metric)
        yield quiet
    for fam, doc, field in _COUNTERS:
        c = CounterMetricFamily(fam, doc, labels=names)
        c.add_metric(values, getattr(status, field))
        yield c
