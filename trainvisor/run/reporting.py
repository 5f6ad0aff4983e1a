"""A started run's reports: `status_counts` (the counts of `Run.status()`, read from the parts at
the moment a reader asks) and `summarise` (the `RunSummary` at the end). A mixin of `_Parts`."""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from .summary import EXIT_STOPPED, FaultCount, RunSummary

if TYPE_CHECKING:
    from ..supervisor.supervisor import ProcessResult

__all__ = ["_Reporting"]

log = logging.getLogger("trainvisor")


class _Reporting:
    """The status and the summary of a started run."""

    def status_counts(self) -> dict:
        """The counts of a `RunStatus`, read from the parts without a lock: each is one int
        written by one thread (the pipeline's, the watcher's) or a snapshot taken under its own
        lock (the upload manager's progress)."""
        stats = self.pipeline.stats if self.pipeline is not None else None
        last = self.stats_sink.last_time
        counts = dict(lines=stats.lines if stats else 0, records=stats.events if stats else 0,
                      metrics=self.stats_sink.metrics,
                      faults=self.pipeline.faults.total if self.pipeline is not None else 0,
                      checkpoints_complete=self.watcher.stats.handed_over if self.watcher is not None else 0,
                      seconds_since_metric=None if last is None else max(0.0, time.time() - last))
        if self.group is not None:  # every destination's backlog: a set owed to two stores is two uploads
            p = self.group.progress()
            counts.update(uploads_verified=p.sets_verified, uploads_failed=p.sets_failed, upload_bytes=p.bytes_sent,
                          uploads_skipped=p.sets_skipped)
        return counts

    def summarise(self, result: "ProcessResult", *, attempts: int) -> RunSummary:
        from .endwarnings import end_warnings

        assert self.pipeline is not None
        stats_sink, watcher = self.stats_sink, self.watcher
        stats = self.pipeline.stats
        found = watcher.stats.handed_over if watcher is not None else 0
        destination = None if self.group is None else (
            ", ".join(self.group.urls) or type(self.run._uploader).__name__)
        warnings = end_warnings(destination=destination, checkpoints_found=found,
                                watched=sorted(watcher.roots) if watcher is not None else (),
                                lines=stats.lines, metrics=stats_sink.metrics,
                                parser=getattr(self.parser, "name", type(self.parser).__name__))
        warnings += self._unapplied_rules()
        for w in warnings:
            log.warning("%s", w)
        sinks = tuple(s.counts() for s in self.counted)
        for c in sinks:  # the run log keeps them when no summary is printed
            log.info("sink %s: %d records written, %d dropped, %d failed, %.3f s CPU%s", c.name, c.written, c.dropped,
                     c.failed, c.cpu_seconds, " (abandoned at the end)" if c.abandoned else "")
        if result.stop_reason is not None:
            log.warning("the training was stopped on request (%s); exit code %d (the child's %d)",
                        result.stop_reason, EXIT_STOPPED, result.exit_code)
        return RunSummary(
            run_id=self.run.run_id, attempt=self.run.attempt, run_dir=str(self.run.run_dir),
            command=self.run.config.command,
            abandoned=self.run.shutdown.abandoned,  # a shutdown's steps given up (run/shutdown.py)
            exit_code=EXIT_STOPPED if result.stop_reason is not None else result.exit_code,
            returncode=result.returncode, lines=stats.lines, events=stats.events,
            metrics_path=str(self.run.metrics_path), truncated_lines=stats.truncated_lines,
            unparsed_bytes=result.unparsed_bytes, binary_bytes=stats.binary_bytes,
            killed_processes=result.killed_processes,
            signalled_by=result.signalled_by,
            faults=tuple(FaultCount(c, n) for c, n in sorted({**self.pipeline.faults.counts, **(
                self.callbacks.dispatcher.faults.counts if self.callbacks is not None else {})}.items())),
            metrics=stats_sink.metrics, checkpoints_announced=stats_sink.checkpoints, checkpoints_complete=found,
            uploads=self.uploads[0] if self.uploads else None, destinations=self.uploads,
            last_metrics=tuple(stats_sink.last.values()), table=stats_sink.table.rows(),
            notices=tuple(stats_sink.notices.values()), warnings=warnings,
            stop_reason=result.stop_reason, attempts=attempts, sinks=sinks,
            stop_rule=self.stop_rules.rules.fired if self.stop_rules is not None else None,
        )

    def _unapplied_rules(self) -> tuple[str, ...]:
        """A rule whose metric the run never produced did nothing: said, never a silent nothing."""
        if self.stop_rules is None:
            return ()
        rules = self.stop_rules.rules
        seen = ", ".join(sorted(rules.names_seen)[:12]) or "none"
        return tuple(f"stop rule {r!r} never applied: no metric it names was parsed (metrics seen: {seen})"
                     for r in rules.unmatched())
