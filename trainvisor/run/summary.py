"""`RunSummary`: what a finished run reports, as one typed record (the CLI prints it; Python
callers and tests read its fields)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Optional

from .._frozen import frozen
from ..events import Metric, Notice
from ..secrets import mask_url

if TYPE_CHECKING:
    from ..sinks.lastbest import MetricRow
    from ..sinks.threaded import SinkCounts
    from ..stoprules import Firing

__all__ = ["RunSummary", "FaultCount", "UploadTotals", "EXIT_STOPPED"]

# `trainvisor run`'s exit status when it stopped the training itself, on request (a caller of
# `Run.request_stop`, a stop rule): apart from the child's own codes 0-2 and 128+N.
EXIT_STOPPED = 4


@frozen
class FaultCount:
    """How often one component (a hook, a sink, the parser, the watcher) failed; each failure was
    contained and logged, none reached the training."""

    component: str
    count: int


@frozen
class UploadTotals:
    """The uploads of one destination at exit, as the upload journal states them: checkpoint sets
    and object keys verified, pending (resumed by the next start on this run directory), failed
    for good or skipped (superseded before their upload began: `--upload-policy last`); and what
    they cost in time: bytes sent, seconds an upload was in flight, the rate over those seconds,
    seconds waited on the rate limit."""

    destination: str
    sets_verified: int = 0
    sets_pending: int = 0
    sets_failed: int = 0
    verified: tuple[str, ...] = ()
    pending: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    """The sets retention deleted from the store (their names), in the order they were."""
    sets_skipped: int = 0
    skipped: tuple[str, ...] = ()
    """The set keys skipped."""
    bytes_sent: int = 0
    seconds: float = 0.0
    rate: float = 0.0
    limiter_wait: float = 0.0

    @classmethod
    def from_report(cls, destination: str, report) -> "UploadTotals":
        """From an upload manager's `DrainReport`; the destination as a message may show it. A
        report without progress or skipped sets (another drainer's) leaves those fields at 0."""
        p, skipped = getattr(report, "progress", None), tuple(getattr(report.sets, "skipped", ()))
        timing = {} if p is None else dict(bytes_sent=p.bytes_sent, seconds=round(p.seconds, 3),
                                           rate=round(p.rate, 1), limiter_wait=round(p.limiter_wait, 3))
        return cls(destination=mask_url(destination), sets_verified=len(report.sets.verified),
                   sets_pending=len(report.sets.pending), sets_failed=len(report.sets.failed),
                   verified=tuple(report.verified), pending=tuple(report.pending), failed=tuple(report.failed),
                   deleted=tuple(getattr(report, "deleted", ())),
                   sets_skipped=len(skipped), skipped=skipped, **timing)

    @property
    def complete(self) -> bool:
        return not self.pending and not self.failed


@frozen
class RunSummary:
    """One finished run. `exit_code` is what `trainvisor run` exits with: the child's code, or
    128+N when it died of signal N, or EXIT_STOPPED (4) when the run asked it to stop
    (`Run.request_stop`: `stop_reason` says why; `returncode` is still the child's). `attempt`
    counts the child's starts in the run directory (the last one's number).
    `notices`: the first record of each Notice code the parsers gave (values the output lacks);
    `warnings`: what the run ended on that its reader must know (nothing uploaded, no metric
    parsed), each naming its remedy. `sinks`: each sink's records written, dropped and failed
    (the run's JSONL file first); `table`: each metric's last and best value."""

    run_id: str
    attempt: int
    run_dir: str
    command: tuple[str, ...]
    exit_code: int
    returncode: int
    lines: int
    events: int
    metrics_path: Optional[str] = None
    truncated_lines: int = 0
    unparsed_bytes: int = 0
    binary_bytes: int = 0
    """Output that looked binary: passed through unchanged, not parsed (`unparsed_bytes`: passed
    through unparsed because parsing had fallen too far behind)."""
    killed_processes: int = 0
    signalled_by: Optional[int] = None
    faults: tuple[FaultCount, ...] = ()
    metrics: int = 0
    checkpoints_announced: int = 0
    checkpoints_complete: int = 0
    uploads: Optional[UploadTotals] = None
    """The first destination's uploads (`destinations[0]`), where a reader of one looks."""
    last_metrics: tuple[Metric, ...] = ()
    notices: tuple[Notice, ...] = ()
    warnings: tuple[str, ...] = ()
    stop_reason: Optional[str] = None
    attempts: int = 1
    """Child starts in this Run (a restart into the same run counts; its records say `attempt`)."""
    restarts: tuple[str, ...] = ()
    """One line per restart of a crashed training (`restart.policy`): the attempt, why, and the
    checkpoint it resumed from."""
    sinks: tuple[SinkCounts, ...] = ()
    abandoned: tuple[str, ...] = ()
    """What a shutdown within `process.grace` gave up (an exit checkpoint's wait, uploads left
    pending, the child's wait cut by SIGKILL), each in a sentence; empty when nothing was."""
    table: tuple[MetricRow, ...] = ()
    """Per metric and phase (and Caffe test net): its last value and its best, each with its step
    (iteration, else epoch); best is None for a metric with no better direction (lr, time)."""
    stop_rule: Optional[Firing] = None
    """The stop rule that fired (rule, metric, value, line), when one did; `stop_reason` is its
    `describe()` when its stop request was the run's first."""
    followed: Optional[object] = None
    """A sidecar's follow of its log (`stream.tail.TailStats`: rotations, truncations); None for a child."""
    node: Optional[int] = None
    """This machine's index in a multi-node run (`identity.NodeIdentity`); None on one machine."""
    process_rank: Optional[int] = None
    """This trainvisor process's world rank, when one is started per rank (not a metric's `rank`)."""
    destinations: tuple[UploadTotals, ...] = ()
    """Every destination's uploads, in `upload.to`'s order (one for a single destination)."""

    @property
    def faults_by_component(self) -> Mapping[str, int]:
        return {f.component: f.count for f in self.faults}

    @property
    def fault_total(self) -> int:
        return sum(f.count for f in self.faults)
