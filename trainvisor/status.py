"""`RunStatus`: what a run is doing now, as one frozen snapshot any thread may read.

Why a snapshot taken on demand instead of counters pushed to each reader: the readers (a
Prometheus scrape, a health check, a user's monitor) ask rarely, while the numbers change on
the hot path (lines, records) or on other threads (uploads, the child). Taking the snapshot
costs the run nothing between asks, and a reader always sees one consistent moment of the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["RunStatus", "CHILD_STATES", "CHILD_NOT_STARTED", "CHILD_RUNNING", "CHILD_STOPPING", "CHILD_EXITED"]

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
    node: Optional[int] = None
    """This machine's index in a multi-node run (`identity.NodeIdentity`); None on one machine."""
    process_rank: Optional[int] = None
    """This trainvisor process's world rank, when one is started per rank (not `Metric.rank`)."""
    seconds_since_metric: Optional[float] = None
