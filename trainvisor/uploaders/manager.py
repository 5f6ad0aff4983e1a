"""Uploads checkpoint sets off the caller's thread: journal first, retry with backoff, manifest last.

`submit` only journals and hands the set to an executor (a future per set), so the reader thread
never waits on the network. `drain` waits on those futures with a timeout and reports what the
journal says at that moment. `resume` re-submits the sets a killed trainvisor left unfinished in
the same run directory (reconcile.py: the journal, checkpoints.jsonl, the files, the store); a file
whose current version is already verified is not uploaded again. No multipart upload is left open:
`sweep_orphans` aborts those under the run's keys that no record owns.
"""
from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import Executor, Future, wait
from functools import partial
from typing import TYPE_CHECKING, Callable, Optional

from ..defaults import UPLOAD_CONCURRENCY
from ..checkpoints import Manifest, ManifestEntry
from ..events import Checkpoint
from .base import Uploader, UploadError
from .outcomes import DrainReport, RetryPolicy, SetOutcome, UploadCancelled, UploadProgress
from .pool import DaemonThreadPool
from .sending import ObjectSending
from .pruning import make_pruner
from .ratelimit import TokenBucket
from .s3_pace import pace_requests
from .startgate import StartGate
from .superseded import QueuedSet, SupersededSets, step_of
from .throughput import UploadMeter
from .journal import FAILED, JOURNAL_FILE, QUEUED, SKIPPED, VERIFIED, Journal, JournalOwner
from .reconcile import CHECKPOINT_RECORD, StoreCheck, plan_resume, read_checkpoint_record, verified_sets

if TYPE_CHECKING:
    from .retention import RetentionPolicy
    from .values import BestByValues

__all__ = ["UploadManager", "DrainReport", "RetryPolicy", "UploadProgress", "SetOutcome", "UploadCancelled"]

log = logging.getLogger("trainvisor.upload")


class UploadManager(ObjectSending):
    """Bounded-concurrency uploads of checkpoint sets; `key_template` uses prefix, run_id, relpath.

    With `manifests=False` (`trainvisor upload`), each set is just its files. `executor` runs one
    set per task (default: a DaemonThreadPool of `concurrency` workers, shut down by `close`;
    an executor passed in stays the caller's). Use it as a context manager: leaving it closes.
    `retention` (with `values`, the --best-by metric's): after each verified set, the sets it no
    longer keeps are deleted from the store (pruning.py); --delete-after-upload then follows it.
    `journal_name`: this destination's journal file in `run_dir` (`journal.journal_name`: a run
    with several destinations has one manager and one journal for each).
    """

    def __init__(
        self,
        uploader: Uploader,
        *,
        run_dir: str,
        run_id: str,
        prefix: str = "",
        key_template: str = "{prefix}/{run_id}/{relpath}",
        concurrency: int = UPLOAD_CONCURRENCY,
        delete_after_upload: bool = False,
        manifests: bool = True,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Optional[Callable[[float], object]] = None,
        rng: Optional[random.Random] = None,
        executor: Optional[Executor] = None,
        clock: Callable[[], float] = time.monotonic,
        retention: Optional["RetentionPolicy"] = None,
        values: Optional["BestByValues"] = None,
        limiter: Optional[TokenBucket] = None,
        skip_superseded: bool = False,
        journal_name: str = JOURNAL_FILE,
    ) -> None:
        self._up = uploader
        url = str(getattr(uploader, "url", "") or type(uploader).__name__)
        self._journal = Journal(run_dir, owner=JournalOwner.of(run_id, url), name=journal_name)
        self._store = StoreCheck(uploader, self._journal)
        self._run_dir = run_dir
        self._run_id, self._prefix, self._template = run_id, prefix, key_template
        self._delete = delete_after_upload
        self._manifests = manifests
        self._bytes_done = self._bytes_total = self._files_done = self._files_total = self._skipped = 0
        self._bytes_skipped = self._sets_skipped = 0
        self._sets_ended: dict[str, int] = {VERIFIED: 0, FAILED: 0}
        self._stopping = threading.Event()
        self._retry, self._rng = retry, rng or random.Random()
        self._sleep = sleep if sleep is not None else self._stopping.wait  # close() cuts a backoff short
        self._clock = clock
        self._meter = UploadMeter(clock)
        # One bucket for all the run's destinations: S3 pays each request before it is sent, others each chunk sent.
        self._limiter = limiter
        self._unpace = pace_requests(uploader, partial(self._pay, whole=True)) if limiter is not None else None
        self._lock = threading.Lock()
        self._futures: set[Future] = set()
        self._keys: set[str] = set()   # what this manager took on (submitted, resumed): its report
        self._set_keys: set[str] = set()
        self._set_locks: dict[str, threading.Lock] = {}
        self._own_pool = executor is None
        self._pool: Executor = executor or DaemonThreadPool(max(1, concurrency),
                                                             thread_name_prefix="trainvisor-upload")
        self._pruner = make_pruner(retention if manifests else None, self._journal, uploader, run_dir=run_dir,
                                   run_id=run_id, key_for=self.key_for, lock_of=self._set_lock, values=values,
                                   delete_local=delete_after_upload)
        # `--upload-policy last`, and retention's "would delete it at once": a queued set skipped
        self._superseded = SupersededSets(skip_superseded, getattr(self._pruner, "skip_reason", None))
        self._gate = StartGate()  # open unless the store could not be reached at start (startgate.py)

    def __enter__(self) -> "UploadManager":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def key_for(self, relpath: str) -> str:
        return self._template.format(prefix=self._prefix, run_id=self._run_id, relpath=relpath).lstrip("/")

    def preflight(self) -> None:
        self._up.preflight()

    def start_when_reachable(self, error: UploadError) -> None:
        """The store could not be reached at start (`error`, retryable): nothing is sent, swept
        or pruned until a preflight passes (tried again with this manager's backoff); then the
        orphan sweep, and retention's pass once the sets go (startgate.py)."""
        self._gate.defer(self._up.preflight, error, url=str(getattr(self._up, "url", "")), retry=self._retry,
                         rng=self._rng, before=(self.sweep_orphans,), after=(self.prune,))

    def _set_key(self, cp: Checkpoint) -> str:
        return self.key_for(cp.name + ".manifest.json") if self._manifests else self.key_for(cp.files[0].relpath)

    def submit(self, checkpoint: Checkpoint) -> "Future[SetOutcome]":
        """Journal the checkpoint's files and hand the set to the executor; never blocks on the
        network. The future resolves when the set is verified, failed, or left to a resume."""
        keys, nbytes = [self._set_key(checkpoint)], 0
        with self._lock:
            for f in checkpoint.files:
                st = os.stat(f.path)
                keys.append(self.key_for(f.relpath))
                self._journal.queue(keys[-1], f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
                nbytes += st.st_size
            self._bytes_total += nbytes
            self._files_total += len(checkpoint.files)
            self._journal.add_set(keys[0], checkpoint)
            self._keys.update(keys)
            self._set_keys.add(keys[0])
        ticket = self._superseded.submitted(keys, nbytes, len(checkpoint.files), step_of(checkpoint),
                                            checkpoint=checkpoint, set_key=keys[0])
        # Outside the lock: an executor may run the task inline (the task takes the lock too).
        future = self._pool.submit(self._upload_set, checkpoint, ticket)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget_future)  # at once if it is done already
        return future

    def _forget_future(self, future: Future) -> None:
        with self._lock:
            self._futures.discard(future)

    def resume(self) -> int:
        """Re-submit what an earlier trainvisor left unfinished in this run directory: the
        journal's unfinished sets and every set checkpoints.jsonl records complete that the
        journal does not hold verified (its rows may be lost). A set whose files are gone is
        recorded as failed and reported, never silently dropped."""
        recorded = read_checkpoint_record(os.path.join(self._run_dir, CHECKPOINT_RECORD)) if self._manifests else []
        plan = plan_resume(self._journal, recorded, self._set_key, self.key_for)
        for cp, missing in plan.gone:
            self._journal.add_set(self._set_key(cp), cp)
            self._journal.set_done(self._set_key(cp), FAILED)
            gone = [f for f in cp.files if f.path in missing]
            for f in gone:
                self._journal.gone(self.key_for(f.relpath), f.path, "file gone before its upload resumed")
            log.error("checkpoint %s cannot be uploaded: %s gone", cp.name, ", ".join(missing))
            with self._lock:
                self._keys.update(self.key_for(f.relpath) for f in gone)
                self._set_keys.add(self._set_key(cp))
                self._sets_ended[FAILED] += 1
        for cp in plan.submit:
            self.submit(cp)
        return len(plan.submit)

    def recheck_verified(self) -> int:
        """Ask the store for the manifest of every set checkpoints.jsonl records and the journal
        holds verified (`trainvisor resume`: nothing counted done on the journal's word alone):
        a set whose manifest the store lacks is uploaded again, its files asked of the store
        first. Every recorded set is then in this manager's report. The sets sent again."""
        recorded = read_checkpoint_record(os.path.join(self._run_dir, CHECKPOINT_RECORD)) if self._manifests else []
        again = 0
        for set_key, cp in verified_sets(self._journal, recorded, self._set_key).items():
            mpath = os.path.join(self._run_dir, f".{cp.name}.manifest.json")
            if os.path.exists(mpath) and self._store.in_store(mpath, set_key) is None:
                log.warning("checkpoint %s is journaled verified but its manifest is not in the store: "
                            "uploading it again", cp.name)
                self._journal.doubt([set_key, *(self.key_for(f.relpath) for f in cp.files)])
                self.submit(cp)
                again += 1
            with self._lock:
                self._set_keys.add(set_key)
        return again

    def sweep_orphans(self) -> tuple[str, ...]:
        """Abort the store's open multipart uploads under this run's keys that no resume record
        owns (a kill between CreateMultipartUpload and its record, a create retried after a lost
        reply): they would stay billed for ever. Only for keys under the run id (never another
        run's); a store that cannot list them is skipped. The keys aborted, each logged."""
        sweep = getattr(self._up, "abort_unowned", None)
        if sweep is None or "{run_id}" not in self._template:
            return ()
        prefix = self.key_for("")
        try:
            aborted = tuple(sweep(prefix))
        except UploadError as exc:
            log.warning("cannot list the open multipart uploads under %s (%s): left to the next start", prefix, exc)
            return ()
        for key in aborted:
            log.warning("aborted an open multipart upload of %s that no journal entry owned", key)
        return aborted

    def progress(self) -> UploadProgress:
        seconds, waited = self._meter.seconds()
        with self._lock:
            return UploadProgress(self._bytes_done, self._bytes_total, self._files_done, self._files_total,
                                  self._skipped, self._bytes_skipped, self._sets_ended[VERIFIED],
                                  self._sets_ended[FAILED], seconds=seconds, limiter_wait=waited,
                                  sets_skipped=self._sets_skipped)

    def _upload_set(self, cp: Checkpoint, ticket: int = 0) -> SetOutcome:
        """One set at a time per set key: a set submitted again while it uploads (resumed, then
        rewritten by the training) waits, then finds its unchanged files already verified."""
        set_key = self._set_key(cp)
        try:
            if not self._gate.wait():  # closed until the store answers; False: closing first
                return SetOutcome(set_key, QUEUED)
            superseded = self._superseded.starting(ticket)
            if superseded is not None:
                state = self._skip(cp, set_key, superseded)
            else:
                with self._set_lock(set_key), self._meter.busy():
                    state = self._upload_set_locked(cp, set_key)
            if state in self._sets_ended:
                with self._lock:
                    self._sets_ended[state] += 1
            if state == VERIFIED:
                self.prune()  # outside the set's lock: the policy may drop this very set
            return SetOutcome(set_key, state)
        except Exception:  # a bug or a vanished run directory: logged, the set stays for a resume
            log.exception("upload of checkpoint %s stopped", cp.name)
            return SetOutcome(set_key, QUEUED)
        finally:
            self._superseded.ended(ticket)

    def _skip(self, cp: Checkpoint, set_key: str, queued: QueuedSet) -> str:
        """A newer set was queued before this one's upload began (superseded.py): never sent. The
        same set queued again (rewritten) keeps its key: this submission alone is dropped."""
        replaced = set_key not in queued.keys
        self._journal.skip(None if replaced else set_key, queued.keys - {set_key})
        log.info("checkpoint %s skipped: %s", cp.name, queued.why)
        with self._lock:
            self._bytes_total -= queued.nbytes
            self._files_total -= queued.nfiles
            self._sets_skipped += 0 if replaced else 1
        return SKIPPED

    def _set_lock(self, set_key: str) -> threading.Lock:
        with self._lock:
            return self._set_locks.setdefault(set_key, threading.Lock())

    def prune(self, *, wait: float = 0.0) -> tuple[str, ...]:
        """Retention's pass (pruning.py): the names of the sets deleted from the store; a failure
        is logged, never raised (the sets stay, the next pass tries again). `wait`: seconds for a
        pass running on a worker, then one more (the last pass of a run, once the log has ended)."""
        if self._pruner is None or not self._gate.is_open:  # never on a store that has not answered
            return ()
        try:
            return self._pruner.prune(wait=wait)
        except Exception:
            log.exception("retention of checkpoint sets stopped; the sets are kept")
            return ()

    def _upload_set_locked(self, cp: Checkpoint, set_key: str) -> str:
        entries = []
        for f in cp.files:
            key = self.key_for(f.relpath)
            obj = self._upload_one(f.path, key)
            if obj is None and self._stopping.is_set():
                return QUEUED  # stays unfinished in the journal: the next trainvisor resumes it
            if obj is None:
                self._journal.set_done(set_key, FAILED)  # no manifest for an incomplete set
                return FAILED
            entries.append(ManifestEntry(relpath=f.relpath, key=key, size=obj.size, checksum=obj.checksum))
        if self._manifests:
            state = self._upload_manifest(Manifest.of(self._run_id, cp, tuple(entries)))
            if state != VERIFIED:
                return state
        self._journal.set_done(set_key)
        if self._delete and self._manifests and self._pruner is None:  # with retention: pruning.py
            for f in cp.files:
                os.unlink(f.path)
        return VERIFIED

    def drain(self, timeout: float) -> DrainReport:
        """Wait up to `timeout` seconds for the submitted sets; report what the journal says then.
        Returns within the timeout even while an upload is in flight (it goes on, or is resumed)."""
        deadline = self._clock() + max(0.0, timeout)
        while True:
            with self._lock:
                futures = set(self._futures)
            left = deadline - self._clock()
            if not futures or left <= 0:
                break
            wait(futures, timeout=left)  # a set resubmitted meanwhile is waited for on the next turn
        return self.report()

    def report(self) -> DrainReport:
        """What the journal says now about every key this manager took on (the files and
        manifests of the sets submitted or resumed, and files found gone on resume). Keys of
        an earlier attempt that nothing resumed are not this manager's to report."""
        with self._lock:
            keys, set_keys = set(self._keys), set(self._set_keys)
        states = self._journal.states(keys)
        return DrainReport(pending=states.pending, failed=states.failed, verified=states.verified,
                           sets=self._journal.set_states(set_keys), deleted=self._journal.deleted_sets(),
                           progress=self.progress())

    def close(self, timeout: float = 5.0) -> None:
        """Stop: queued sets are cancelled (the journal keeps them for a resume) and an upload in
        flight stops at its next chunk or part; one still running after `timeout` is abandoned."""
        self._stopping.set()
        self._gate.stop()  # the sets waiting on it leave as queued
        ends = time.monotonic() + timeout
        with self._lock:
            futures = set(self._futures)
        for f in futures:
            f.cancel()
        _done, running = wait(futures, timeout=timeout)
        gate_ended = self._gate.join(ends - time.monotonic())  # a preflight in flight: its steps use the journal
        if self._unpace is not None:  # the uploader may serve another manager: no hook of this one left
            self._unpace()
        if self._own_pool:  # joined when idle, so no worker thread outlives close()
            self._pool.shutdown(wait=not running, cancel_futures=True)
        if running:
            log.warning("%d upload(s) still running at close; the journal resumes them next time", len(running))
        if running or not gate_ended:  # a preflight still trying a store that is down: its sets are pending
            return  # the journal stays open for them: closing it under a writer would lose their record
        if self._keys and self._gate.is_open and not self._journal.states(self._keys).pending:
            self.sweep_orphans()  # all done: any upload still open under the run's keys is debris
        self._journal.close()
