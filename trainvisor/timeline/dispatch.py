"""Calling every callback for every timeline event, and the stop votes.

Every registered callback that has a hook for an event is called, in registration order, with
the keyword arguments it asked for. One callback raising is logged (its first failure with the
traceback, then at 10, 100 ... failures) and counted per callback and hook; the others are still
called and the training goes on. A hook votes to stop by returning True or a reason string.
MXNet's Gluon estimator once broke out of its handler loop at the first stop vote, so the
handlers after it never saw that batch; here every callback sees the event first, then, if any
voted, `request_stop` is called once with the votes' reasons (only for the first event that
gets a vote: the run stops once). A vote on `train_end` stops nothing and is not asked.
"""
from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from typing import Callable, Mapping, Optional, Sequence

from ..stream.faults import FaultCounter
from .callbacks import Registered
from .events import TimelineEvent

__all__ = ["Dispatcher"]

log = logging.getLogger("trainvisor.callbacks")


class Dispatcher:
    """Not thread-safe: one thread calls `dispatch` (the callbacks' own, see runner.py)."""

    def __init__(self, callbacks: Sequence[Registered], *,
                 request_stop: Optional[Callable[[str], object]] = None) -> None:
        self.callbacks = tuple(callbacks)
        self._request_stop = request_stop
        self.faults = FaultCounter(log)
        self.events: Counter[str] = Counter()  # events dispatched, by kind
        self.votes: list[str] = []  # every stop vote, in order ("LABEL: reason")
        self.stop_reason: Optional[str] = None  # what request_stop was called with

    def dispatch(self, event: TimelineEvent) -> Optional[str]:
        """Call every callback's hook for `event`; the stop reason asked for now, if any."""
        kind = event.kind
        self.events[kind] += 1
        args: Optional[dict] = None
        voted: list[str] = []
        for cb in self.callbacks:
            hook = cb.hooks.get(kind)
            if hook is None:
                continue
            if args is None:
                args = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
                args["event"] = event
            kwargs = args if hook.wants is None else {k: args[k] for k in hook.wants}
            try:
                result = hook.method(**kwargs)
            except Exception as exc:  # a callback's bug is contained: counted, never raised into the run
                self.faults.record(f"callback {cb.label}.on_{kind}", exc)
                continue
            reason = _vote(result, cb.label, kind)
            if reason is not None:
                voted.append(reason)
        self.votes.extend(voted)
        if not voted or self.stop_reason is not None or kind == "train_end":
            return None
        self.stop_reason = "; ".join(voted)
        if self._request_stop is not None:
            try:
                self._request_stop(self.stop_reason)
            except Exception as exc:
                self.faults.record("request_stop", exc)
        return self.stop_reason

    @property
    def fault_counts(self) -> Mapping[str, int]:
        return dict(self.faults.counts)


def _vote(result: object, label: str, kind: str) -> Optional[str]:
    """True or a non-empty string is a vote (its reason); anything else is none."""
    if result is True:
        return f"{label}: stop voted on {kind}"
    if isinstance(result, str) and result:
        return f"{label}: {result}"
    return None
