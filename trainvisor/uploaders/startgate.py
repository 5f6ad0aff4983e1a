"""A destination that cannot be reached when the run starts does not stop the run.

A preflight that fails with an error that trying again can cure (the store refuses the
connection, times out, is not found by DNS, answers 5xx or "slow down": `retryable`, the same
judgement an upload is retried by) is an outage, not a mistake in the configuration. The training
starts; its checkpoint sets are journaled and queued as ever, and the destination's `StartGate`
holds them until the store answers. A thread of the gate tries the preflight again with the
manager's backoff (capped by `upload.retry_max_delay`); once it passes, what must come before
anything is sent runs (the sweep of open multipart uploads no record owns), the gate opens, and
what follows runs (retention's first pass). Until then nothing is sent to, swept from, pruned
from or marked on that store. Each destination has its own gate and workers: the others never
wait on it.

A store that answers with a refusal meanwhile (credentials revoked: 403) ends the retries: its
sets stay queued, pending in the summary, for `trainvisor resume`. A refusal at start is still
what it always was: raised, one line, before the training starts.
"""
from __future__ import annotations

import logging
import random
import threading
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..secrets import mask_url
from .base import UploadError
from .outcomes import RetryPolicy

if TYPE_CHECKING:
    from .manager import UploadManager

__all__ = ["StartGate", "preflight_or_defer"]

log = logging.getLogger("trainvisor.upload")

Step = Callable[[], object]


def preflight_or_defer(manager: "UploadManager", url: str, *, defer: bool = True) -> Optional[UploadError]:
    """The manager's preflight: None when the store answered; with `defer`, the error (one
    WARNING line said) when it cannot be reached now; a configuration error is raised, as it
    always was (and every error without `defer`)."""
    try:
        manager.preflight()
    except UploadError as exc:
        if not (exc.retryable and defer):
            raise
        log.warning("upload destination %s cannot be reached (%s): the training starts; its checkpoint sets are "
                    "journaled and uploaded once it answers", mask_url(url), exc)
        return exc
    return None


class StartGate:
    """Open (the store answered at start) until `defer`red. `wait` is called by each upload worker
    before its set begins; `stop` (the manager's close) releases the workers and ends the retries."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._open = True
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    @property
    def is_open(self) -> bool:
        return self._open

    def wait(self) -> bool:
        """Block until the store has answered (True) or the manager stops first (False)."""
        with self._cond:
            self._cond.wait_for(lambda: self._open or self._stop.is_set())
            return self._open

    def defer(self, preflight: Step, first: UploadError, *, url: str, retry: RetryPolicy, rng: random.Random,
              before: Sequence[Step] = (), after: Sequence[Step] = ()) -> None:
        """Close the gate and try `preflight` again (`first`: how it failed) on a thread until it
        passes; then run `before`, open, and run `after`, each step's failure logged, never raised."""
        with self._cond:
            self._open = False
        self._thread = threading.Thread(target=self._reopen, args=(preflight, first, url, retry, rng, before, after),
                                        name="trainvisor-upload-start", daemon=True)
        self._thread.start()

    def _reopen(self, preflight: Step, first: UploadError, url: str, retry: RetryPolicy, rng: random.Random,
                before: Sequence[Step], after: Sequence[Step]) -> None:
        if not self._answered(preflight, first, url, retry, rng):
            return
        log.info("upload destination %s answers now: its queued checkpoint sets are uploaded", mask_url(url))
        for step in before:
            if self._stop.is_set():
                return
            _contained(step)
        with self._cond:
            if self._stop.is_set():
                return
            self._open = True
            self._cond.notify_all()
        for step in after:
            _contained(step)

    def _answered(self, preflight: Step, error: UploadError, url: str, retry: RetryPolicy,
                  rng: random.Random) -> bool:
        """Whether a preflight passed before `stop`. The outage's error is logged when it
        changes (each try at the cap would say the same line every few seconds for days)."""
        attempt = 0
        while not self._stop.wait(retry.delay(attempt, rng)):
            try:
                preflight()
                return True
            except UploadError as exc:
                if not exc.retryable:
                    log.error("upload destination %s refuses now (%s): its checkpoint sets stay queued for "
                              "`trainvisor resume`", mask_url(url), exc)
                    return False
                if str(exc) != str(error):
                    log.info("upload destination %s still cannot be reached: %s", mask_url(url), exc)
                error, attempt = exc, attempt + 1
            except Exception:  # a bug: the sets stay queued, the training goes on
                log.exception("preflight of upload destination %s stopped; its checkpoint sets stay queued",
                              mask_url(url))
                return False
        return False

    def stop(self) -> None:
        """Release the waiting workers and end the retries (a preflight in flight ends first)."""
        self._stop.set()
        with self._cond:
            self._cond.notify_all()

    def join(self, timeout: float) -> bool:
        """Whether the gate's thread (none when never deferred) has ended, waiting up to `timeout`."""
        if self._thread is None:
            return True
        self._thread.join(max(0.0, timeout))
        return not self._thread.is_alive()


def _contained(step: Step) -> None:
    try:
        step()
    except Exception:
        log.exception("a start step of an upload destination that answered late failed")
