"""What a restart on a run directory must finish, from every source, not the journal alone.

The journal may have lost rows (its WAL emptied or cut by a crash, or rebuilt), so a restart
reads three sources: the journal's unfinished sets, RUN_DIR/checkpoints.jsonl (every set that
was complete on disk), and the files themselves. A set the journal does not hold verified is
uploaded again; its files the journal forgot are marked `unsure`, so the store is asked
(HEAD/stat) before anything is sent. A set whose files are gone is reported, never dropped.

`StoreCheck` is that question: is exactly this version of a file in the store already?
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

from ..checkpoints import checkpoint_from_dict
from ..events import Checkpoint
from .base import UploadedObject, Uploader, UploadError
from .journal import SKIPPED, UPLOADING, VERIFIED, Journal

__all__ = ["ResumePlan", "plan_resume", "read_checkpoint_record", "verified_sets", "StoreCheck", "CHECKPOINT_RECORD"]

log = logging.getLogger("trainvisor.upload")

CHECKPOINT_RECORD = "checkpoints.jsonl"


def read_checkpoint_record(path: str) -> list[Checkpoint]:
    """The checkpoints a run recorded complete, in order; a line cut by a kill or unreadable is
    skipped (logged): the record is appended to, never rewritten."""
    found = []
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except FileNotFoundError:
        return []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
            if record.get("event") == "checkpoint_complete":
                found.append(checkpoint_from_dict(record))
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("%s line %d is not a checkpoint record: skipped", path, number)
    return found


@dataclass(frozen=True)
class ResumePlan:
    """Sets to upload (again), and sets whose files are gone (with those files)."""

    submit: tuple[Checkpoint, ...]
    gone: tuple[tuple[Checkpoint, tuple[str, ...]], ...]


def plan_resume(journal: Journal, recorded: Iterable[Checkpoint], set_key: Callable[[Checkpoint], str],
                key_for: Callable[[str], str]) -> ResumePlan:
    """The journal's unfinished sets, then every recorded set it does not hold verified or skipped
    (the last record of a set wins: a checkpoint rewritten under its name is its newest files)."""
    chosen: dict[str, Checkpoint] = {}
    for cp in journal.unfinished_sets():
        chosen[set_key(cp)] = cp
    for cp in recorded:
        key = set_key(cp)
        if key in chosen or journal.set_state(key) not in (VERIFIED, SKIPPED):  # skipped: superseded, never wanted
            chosen[key] = cp
    submit, gone = [], []
    for cp in chosen.values():
        missing = tuple(f.path for f in cp.files if not os.path.exists(f.path))
        if missing:
            gone.append((cp, missing))
            continue
        for f in cp.files:  # forgotten by the journal: maybe in the store, ask before sending
            try:
                st = os.stat(f.path)
            except OSError:
                continue  # gone since: the upload reports it
            journal.unsure(key_for(f.relpath), f.path, size=st.st_size, mtime_ns=st.st_mtime_ns)
        submit.append(cp)
    return ResumePlan(tuple(submit), tuple(gone))


def verified_sets(journal: Journal, recorded: Iterable[Checkpoint],
                  set_key: Callable[[Checkpoint], str]) -> dict[str, Checkpoint]:
    """The recorded sets the journal holds verified, by set key (the last record of each); not
    those retention deleted from the store (or is deleting): they are not to be uploaded again."""
    return {set_key(cp): cp for cp in recorded
            if journal.set_state(set_key(cp)) == VERIFIED and not journal.is_deleted(set_key(cp))}


class StoreCheck:
    """Is `path` (this version of it) in the store under `key` already? From the journal when it
    says verified; from the store (`stored(path, key)`) when the journal says it may be there."""

    def __init__(self, uploader: Uploader, journal: Journal) -> None:
        self._up, self._journal = uploader, journal

    def known(self, path: str, key: str, *, ask_store: bool = False) -> Optional[UploadedObject]:
        """The stored object, or None: upload it. `ask_store`: ask even when the journal does not
        say the key may be there (a manifest: a kill may have come between its PUT and its row)."""
        try:
            st = os.stat(path)
        except OSError:
            return None
        checksum = self._journal.verified_checksum(key, size=st.st_size, mtime_ns=st.st_mtime_ns)
        if checksum is not None:
            return UploadedObject(key=key, size=st.st_size, checksum=checksum)
        entry = self._journal.get(key)
        if ask_store or (entry is not None and entry.state == UPLOADING):
            return self.in_store(path, key)
        return None

    def in_store(self, path: str, key: str) -> Optional[UploadedObject]:
        """An earlier attempt (killed, or its journal rows lost) may have stored `key`: when the
        destination can tell and the object is exactly this file, it is journaled verified
        rather than sent again. Any doubt (an error, the file changing) means: upload it."""
        find = getattr(self._up, "stored", None)
        if find is None:
            return None
        try:
            before = os.stat(path)
            obj = find(path, key)
            after = os.stat(path)
        except (OSError, UploadError) as exc:
            log.info("cannot tell whether %s is already stored (%s): uploading it", key, exc)
            return None
        if obj is None or (before.st_size, before.st_mtime_ns) != (after.st_size, after.st_mtime_ns):
            return None
        self._journal.verified(key, obj.checksum, size=after.st_size, mtime_ns=after.st_mtime_ns)
        log.info("%s is stored already (%s): verified, not sent again", key, obj.checksum)
        return obj
