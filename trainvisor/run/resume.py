"""`trainvisor resume RUN_DIR`: finish what a killed run left behind, without running anything.

The run directory says where its checkpoints go (its saved configuration) and which uploads are
unfinished (the upload journal): those are queued again under the run's own id, so the object
keys are the ones the first attempt used, a large file continues from the parts the store holds,
and a file the store already has whole is verified and not sent again.

A damaged or foreign journal stops this with one line; `rebuild_journal=True` sets it aside
(kept, renamed) and a new one is built from checkpoints.jsonl, the files on disk and the store."""
from __future__ import annotations

import dataclasses

import logging
import os
from pathlib import Path
from typing import Optional

from ..errors import ConfigError
from ..identity import NodeIdentity
from ..watch.policy import parse_policy
from .build import build_managers, open_destinations, retention_values
from .logsetup import RunLogging
from .progress import log_outcome
from .rundir import RunDirectory, read_identity
from .saved import load_saved_config
from .summary import UploadTotals

__all__ = ["resume", "resume_destinations"]

log = logging.getLogger("trainvisor")


def resume(run_dir: Path, *, drain_timeout: Optional[float] = None, quiet: bool = False,
           credentials: Optional[str] = None, rebuild_journal: bool = False) -> Optional[UploadTotals]:
    """Finish the run directory's uploads; the first destination's totals (`resume_destinations`:
    every one's), None when the run uploads nowhere."""
    totals = resume_destinations(run_dir, drain_timeout=drain_timeout, quiet=quiet, credentials=credentials,
                                 rebuild_journal=rebuild_journal)
    return totals[0] if totals else None


def resume_destinations(run_dir: Path, *, drain_timeout: Optional[float] = None, quiet: bool = False,
                        credentials: Optional[str] = None, rebuild_journal: bool = False) -> tuple[UploadTotals, ...]:
    """Finish the run directory's uploads to each destination its saved config names, side by
    side within one drain timeout; each destination's totals (empty when the run uploads
    nowhere). `credentials`: a credentials file to use instead of the run's own (a secret mounted
    elsewhere after a restart). `rebuild_journal`: set each upload journal aside and rebuild it
    from the other sources."""
    if read_identity(run_dir) is None:
        raise ConfigError(f"{run_dir} is not a trainvisor run directory (no run.json)")
    config = load_saved_config(run_dir)
    if credentials:
        config = dataclasses.replace(config, upload=dataclasses.replace(config.upload, credentials=credentials))
    rundir = RunDirectory.open(run_dir, run_id=None, new_id=_never)  # it has an identity: checked above
    try:
        logs = RunLogging.start(run_dir, quiet=quiet)
        try:
            log.info("run %s attempt %d: resuming the uploads left in %s", rundir.identity.run_id,
                     rundir.identity.attempt, run_dir)
            if rebuild_journal:
                _set_journals_aside(run_dir, config.upload.destinations)
            return _finish_uploads(config, run_dir, rundir.identity.run_id, drain_timeout)
        finally:
            logs.close()
    finally:
        rundir.close()


def _never() -> str:
    raise AssertionError("a run directory being resumed already has its run id")


def _set_journals_aside(run_dir: Path, urls: tuple[str, ...]) -> None:
    """Each destination's journal set aside (kept, renamed), for a rebuild from the other sources."""
    from ..uploaders.journal import JOURNAL_FILE, Journal, journal_name

    for name in [journal_name(url, several=len(urls) > 1) for url in urls] or [JOURNAL_FILE]:
        aside = Journal.set_aside(str(run_dir), name=name)
        said = f"set aside as {aside}" if aside else ("absent" if len(urls) < 2 else f"{name} absent")
        log.warning("upload journal %s; rebuilding it from checkpoints.jsonl, the files and the store", said)


def _finish_uploads(config, run_dir: Path, run_id: str, drain_timeout: Optional[float]) -> tuple[UploadTotals, ...]:
    opened = open_destinations(config.upload, run_dir=str(run_dir))
    if not opened:
        log.info("run %s uploads nowhere: nothing to resume", run_id)
        return ()
    # The saved config holds the node the run found (Run.start writes it): the same node folder.
    identity = NodeIdentity.from_environ(os.environ, node=config.run.node, process_rank=config.run.process_rank,
                                         local_rank=config.run.local_rank)
    metrics = config.sinks.jsonl or str(run_dir / "metrics.jsonl")  # the --best-by values of the run's log
    group = build_managers(config.upload, opened, run_dir=str(run_dir), run_id=run_id, identity=identity,
                           values=retention_values(config.upload, metrics),
                           skip_superseded=parse_policy(config.watch.policy).skips_superseded)
    try:
        for manager in group.managers:
            manager.recheck_verified()  # the store, not the journal alone, says a set is done
        timeout = config.upload.drain_timeout if drain_timeout is None else drain_timeout
        group.drain(timeout)
        reports = group.reports()
    finally:
        group.close()
    for url, report in zip(group.urls, reports):
        log_outcome(report, within=f"{timeout:g}s (run `trainvisor resume` again for the rest)", destination=url)
    return tuple(UploadTotals.from_report(url, report) for url, report in zip(group.urls, reports))
