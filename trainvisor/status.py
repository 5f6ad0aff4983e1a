"""`RunStatus`: what a run is doing now, as one frozen snapshot any thread may read.

Why a snapshot taken on demand instead of counters pushed to each reader: the readers (a
Prometheus scrape, a health check, a user's monitor) ask rarely, while the numbers change on
the hot path (lines, records) or on other threads (uploads, the child). Taking the snapshot
costs the run nothing between asks, and a reader always sees one consistent moment of the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["RunStatus", "health_of", "CHILD_STATES", "CHILD_NOT_STARTED", "CHILD_RUNNING", "CHILD_STOPPING", "CHILD_EXITED"]

CHILD_NOT_STARTED = "not-started"
CHILD_RUNNING = "running"
CHILD_STOPPING = "stopping"
CHILD_EXITED = "exited"
CHILD_STATES = (CHILD_NOT_STARTED, CHILD_RUNNING, CHILD_STOPPING, CHILD_EXITED)
"""Every value `RunStatus.child` takes, in the order a run goes through them (a stopped or
restarted run goes back to `running` for its next attempt)."""


@dataclass(frozen=True)
class RunStatus:
    """One moment of a run. Counts are totals over every attempt of the run so far.

    `child`: one of CHILD_STATES; `stopping` once a stop was requested and the child has not yet
    exited. `exit_code`: the last child's, once one exited. `seconds_since_metric`: None before
    the first metric (a health check decides what "too long" is). `uploads_*` are checkpoint sets
    (what a person counts); `upload_bytes` the bytes sent so far (files and manifests)."""

    run_id: str
    attempt: int
    child: str
    pid: Optional[int] = None
    exit_code: Optional[int] = None
    stop_reason: Optional[str] = None
    lines: int = 0
    records: int = 0
    metrics: int = 0
    faults: int = 0
    checkpoints_complete: int = 0
    uploads_verified: int = 0
    uploads_failed: int = 0
    upload_bytes: int = 0
    uploads_skipped: int = 0
    """Sets never sent: superseded in the queue (`--upload-policy last`); no backlog."""
    node: Optional[int] = None
    """This machine's index in a multi-node run (`identity.NodeIdentity`); None on one machine."""
    process_rank: Optional[int] = None
    """This trainvisor process's world rank, when one is started per rank (not `Metric.rank`)."""
    seconds_since_metric: Optional[float] = None


def health_of(status: RunStatus, *, max_metric_age: Optional[float], since_start: float) -> tuple[int, dict]:
    """The HTTP status and the body for one snapshot (pure: the tests' cases are RunStatus values).
    `since_start`: seconds since the server started, the age to judge before the first metric."""
    backlog = max(0, status.checkpoints_complete - status.uploads_verified - status.uploads_failed
                  - status.uploads_skipped)
    age = status.seconds_since_metric
    body = {"child": status.child, "attempt": status.attempt, "pid": status.pid,
            "seconds_since_metric": None if age is None else round(age, 3),
            "upload_backlog": backlog, "uploads_failed": status.uploads_failed}
    reason = None
    if status.child == CHILD_EXITED:
        reason = f"the child has exited (exit code {status.exit_code})"
    elif status.child == CHILD_NOT_STARTED:
        reason = "the child has not started"
    elif max_metric_age is not None:
        waited = since_start if age is None else age
        if waited > max_metric_age:
            reason = (f"no metric for {waited:.0f}s (health.max_metric_age {max_metric_age:g}s)" if age is not None
                      else f"no metric yet after {waited:.0f}s (health.max_metric_age {max_metric_age:g}s)")
    body["ok"] = reason is None
    if reason is not None:
        body["reason"] = reason
    return (200 if reason is None else 503), body
