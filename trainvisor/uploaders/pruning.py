"""Retention carried out: after a set is verified, the sets the policy no longer keeps are deleted
from the store; with --delete-after-upload, every verified set's local files but the newest's.

What may be deleted is bounded three ways: only sets this run's journal holds verified, only the
keys the manifest trainvisor wrote for the set lists (its local copy, `.NAME.manifest.json`, read
back: a set without one is never touched), and never a key another set of the journal also
lists. Nothing else under the prefix is ever looked at. A set is deleted manifest first (from
then on no reader takes it for whole), journaled `deleting` before and `deleted` after
(deletions.py); a deletion left unfinished (a kill, a store error) is finished by the next pass or
the next start. A set being uploaded again is skipped (its lock is busy) until a later pass.
The same ranking, asked before a queued set is sent (`skip_reason`), spares the store a set it
would delete as soon as it is verified (superseded.py).
"""
from __future__ import annotations

import logging
import math
import os
import threading
from typing import Callable, Optional, Sequence

from ..checkpoints import Manifest
from ..events import Checkpoint
from .base import StoreError
from .journal import SKIPPED, VERIFIED, Journal
from .retention import RetainedSet, RetentionPolicy, SetValue, select_deletions
from .values import BestByValues

__all__ = ["Pruner", "make_pruner", "Handed"]

log = logging.getLogger("trainvisor.upload")


class Pruner:
    """One run's retention. `prune()` may be called from any thread; passes never overlap."""

    def __init__(self, policy: RetentionPolicy, journal: Journal, store: object, *, run_dir: str, run_id: str,
                 key_for: Callable[[str], str], lock_of: Callable[[str], threading.Lock],
                 values: Optional[BestByValues] = None, delete_local: bool = False) -> None:
        self.policy, self._journal, self._store = policy, journal, store
        self._run_dir, self._run_id, self._key_for, self._lock_of = run_dir, run_id, key_for, lock_of
        self._values, self._delete_local = values, delete_local
        self._busy, self._again = threading.Lock(), threading.Event()
        self._said: set[str] = set()  # what was logged once
        self._local_done: set[str] = set()

    def prune(self, *, wait: float = 0.0) -> tuple[str, ...]:
        """Finish the deletions left unfinished, then delete what the policy no longer keeps. A
        call while a pass runs makes that pass run once more (a set verified meanwhile counts),
        or with `wait` seconds (the run's last pass: its caller exits next) waits for it, then
        runs one. The names of the sets deleted by this call."""
        deleted: list[str] = []
        while True:
            if not (self._busy.acquire(timeout=wait) if wait > 0 else self._busy.acquire(blocking=False)):
                self._again.set()
                return tuple(deleted)
            try:
                self._again.clear()
                deleted += self._redo()
                deleted += self._pass()
            finally:
                self._busy.release()
            if not self._again.is_set():
                return tuple(deleted)

    def _redo(self) -> list[str]:
        done = []
        for set_key, name, keys in self._journal.unfinished_deletions():
            with _held(self._lock_of(set_key)) as free:
                if free and self._delete_keys(name, keys):
                    self._journal.end_deletion(set_key)
                    log.info("deleted checkpoint set %s from the store (a deletion begun earlier, finished)", name)
                    done.append(name)
        return done

    def _pass(self) -> list[str]:
        sets, checkpoints = self._candidates()
        victims = select_deletions(sets, self.policy)
        chosen = {v.set_key for v in victims}
        spare = {k for set_key, cp in self._journal.all_set_files() if set_key not in chosen
                 for k in (set_key, *(self._key_for(f.relpath) for f in cp.files))}
        done = []
        for v in victims:
            if self._delete_set(v, checkpoints[v.set_key], spare):
                done.append(v.name)
        if self._delete_local and sets:
            newest = max(sets, key=lambda s: s.order)
            for s in sets:
                if s.set_key != newest.set_key and s.set_key not in chosen:
                    self._unlink_local(s.set_key, checkpoints[s.set_key])
            self._unlink_skipped(sets)
        return done

    def _candidates(self) -> tuple[list[RetainedSet], dict[str, Checkpoint]]:
        """The verified sets the policy ranks, with their checkpoints: each needs an iteration or an
        epoch (else it cannot be placed among the others) and the manifest trainvisor wrote."""
        sets, checkpoints = [], {}
        for set_key, cp, verified_at in self._journal.retained_sets():
            if cp.iteration is None and cp.epoch is None:
                self._once(f"order:{set_key}", "checkpoint set %s has no iteration or epoch: retention keeps it", cp.name)
                continue
            keys = self._manifest_keys(set_key, cp)
            if keys is None:
                continue
            sets.append(RetainedSet(set_key, cp.name, _order(cp, verified_at), keys, self._value_of(cp)))
            checkpoints[set_key] = cp
        return sets, checkpoints

    def skip_reason(self, candidate: Handed, queued: Sequence[Handed]) -> Optional[str]:
        """Would this policy delete `candidate`, a queued set about to be sent, as soon as it is
        verified, judged with the newer sets already handed over: `queued` (each: set key,
        checkpoint, ticket: the order handed over) and those verified? Then why (superseded.py
        skips it), else None. Undecided, or without an iteration or epoch: kept, as here."""
        key, cp, ticket = candidate
        if cp.iteration is None and cp.epoch is None:
            return None
        mine = RetainedSet(key, cp.name, _order(cp, math.inf, ticket), (), self._value_of(cp))
        newer = {s.set_key: s for s in self._candidates()[0] if s.order > mine.order}
        for k, other, t in queued:
            order = _order(other, math.inf, t)
            if (other.iteration is not None or other.epoch is not None) and order > mine.order:
                newer[k] = RetainedSet(k, other.name, order, (), self._value_of(other))
        newer.pop(key, None)  # the same set, written again: not a newer one
        if not any(s.set_key == key for s in select_deletions([mine, *newer.values()], self.policy)):
            return None
        return f"retention ({self._describe()}) would delete it once verified: {len(newer)} newer set(s) handed over"

    def _manifest_keys(self, set_key: str, cp: Checkpoint) -> Optional[tuple[str, ...]]:
        """The keys this run's manifest of `cp` lists, then the manifest's own; None (said once)
        when there is no such manifest to go by."""
        path = os.path.join(self._run_dir, f".{cp.name}.manifest.json")
        try:
            with open(path, encoding="utf-8") as fh:
                manifest = Manifest.from_json(fh.read())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self._once(f"manifest:{set_key}", "checkpoint set %s: its manifest %s cannot be read (%s): retention "
                       "keeps it", cp.name, path, exc)
            return None
        if manifest.run_id != self._run_id or manifest.name != cp.name:
            self._once(f"manifest:{set_key}", "checkpoint set %s: %s is not this run's manifest of it: retention "
                       "keeps it", cp.name, path)
            return None
        return tuple(e.key for e in manifest.files) + (set_key,)

    def _value_of(self, cp: Checkpoint) -> SetValue:
        if self._values is None:
            return SetValue(None, True)
        value = self._values.value_at(cp.iteration, cp.epoch)
        if value.decided and value.value is None:
            self._once("novalue", "checkpoint set %s has no value of %r at or before its step: a set without one "
                       "never counts as best", cp.name, self._values.best_by.text)
        return value

    def _delete_set(self, v: RetainedSet, cp: Checkpoint, spare: set[str]) -> bool:
        """Delete one set (manifest first), unless it is being uploaded again or changed state."""
        with _held(self._lock_of(v.set_key)) as free:
            if not free or self._journal.set_state(v.set_key) != VERIFIED or self._journal.is_deleted(v.set_key):
                return False
            if self._delete_local:
                self._unlink_local(v.set_key, cp)
            manifest = v.keys[-1]
            keys = [manifest] + [k for k in v.keys[:-1] if k not in spare]
            self._journal.begin_deletion(v.set_key, v.name, keys)
            if not self._delete_keys(v.name, keys):
                return False
            self._journal.end_deletion(v.set_key)
        log.info("deleted checkpoint set %s from the store (%d objects; %s)", v.name, len(keys), self._describe())
        return True

    def _delete_keys(self, name: str, keys: tuple[str, ...] | list[str]) -> bool:
        for key in keys:
            try:
                self._store.delete_object(key)
            except StoreError as exc:
                log.warning("cannot delete %s of checkpoint set %s (%s): retried at the next upload or start",
                            key, name, exc)
                return False
        return True

    def _unlink_local(self, set_key: str, cp: Checkpoint) -> None:
        """--delete-after-upload: a verified set's files, each only in the version verified."""
        if set_key in self._local_done:
            return
        for f in cp.files:
            try:
                st = os.stat(f.path)
            except FileNotFoundError:
                continue
            if self._journal.verified_checksum(self._key_for(f.relpath), size=st.st_size,
                                               mtime_ns=st.st_mtime_ns) is not None:
                os.unlink(f.path)
        self._local_done.add(set_key)

    def _unlink_skipped(self, verified: Sequence[RetainedSet]) -> None:
        """--delete-after-upload: a set skipped before its upload (superseded.py: retention would
        have deleted it at once) leaves the disk as it would have after its upload and deletion:
        once the policy, applied to it among the sets *verified* (not merely queued: one of those
        may yet fail, and then this set is one the policy keeps), deletes it; each file only in
        the version that was skipped."""
        for set_key, cp in self._journal.all_set_files():
            if set_key in self._local_done or self._journal.set_state(set_key) != SKIPPED:
                continue
            if cp.iteration is None and cp.epoch is None:
                continue
            mine = RetainedSet(set_key, cp.name, _order(cp, 0.0), (), self._value_of(cp))
            others = [s for s in verified if s.set_key != set_key]
            if not any(v.set_key == set_key for v in select_deletions([mine, *others], self.policy)):
                continue
            for f in cp.files:
                entry = self._journal.get(self._key_for(f.relpath))
                try:
                    st = os.stat(f.path)
                except FileNotFoundError:
                    continue
                if entry is not None and entry.state == SKIPPED and (entry.size, entry.mtime_ns) == (
                        st.st_size, st.st_mtime_ns):
                    os.unlink(f.path)
            self._local_done.add(set_key)

    def _describe(self) -> str:
        p = self.policy
        rules = [f"keep-last {p.keep_last}"] if p.keep_last else []
        if p.keep_best and p.best_by is not None:
            rules.append(f"keep-best {p.keep_best} by {p.best_by.text!r}")
        return ", ".join(rules)

    def _once(self, what: str, message: str, *args: object) -> None:
        if what not in self._said:
            self._said.add(what)
            log.warning(message, *args)


Handed = tuple[str, Checkpoint, int]
"""A set handed to the manager: its set key, its checkpoint, its ticket (the order handed over)."""


def _order(cp: Checkpoint, verified_at: float, ticket: int = 0) -> tuple:
    """Oldest to newest: iteration, then epoch, then when verified (a queued set: not yet, after
    every verified one), then when handed over."""
    return (cp.iteration is not None, cp.iteration or 0, cp.epoch is not None, cp.epoch or 0.0, verified_at, ticket)


class _held:
    """`with _held(lock) as free:` the lock taken when free (never waited for), released after."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._got = False

    def __enter__(self) -> bool:
        self._got = self._lock.acquire(blocking=False)
        return self._got

    def __exit__(self, *exc: object) -> None:
        if self._got:
            self._lock.release()


def make_pruner(policy: Optional[RetentionPolicy], journal: Journal, store: object, **kwargs) -> Optional[Pruner]:
    """The run's Pruner, or None when no retention is asked for, or the store cannot delete
    (a destination registered without `delete_object`: said once, nothing deleted)."""
    if policy is None or not policy.active:
        return None
    if not callable(getattr(store, "delete_object", None)):
        log.warning("retention asked for, but %s cannot delete objects: every set is kept",
                    getattr(store, "url", type(store).__name__))
        return None
    return Pruner(policy, journal, store, **kwargs)
