"""A checkpoint set's files from a store into a directory, verified, resumable (`trainvisor download`).

Each file is received into `NAME.part` beside where it goes, with a small record
(`NAME.part.json`: the object's key, size and checksum from the manifest). A later attempt
continues a part from its length by a ranged read, but only when the record is that of the same
object version: a part of another object (another set, or the same key rewritten since) is
started over, never completed with someone else's bytes. Every file is checked against the
manifest (size, then the store's own checksum of the bytes) before any is moved into place, so
the directory never holds a mixed set: a file that differs is refused (its part deleted, one line
naming it and what differed) and nothing is renamed.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from ..checkpoints import ManifestEntry
from .base import Progress, ReadError, StoreReader
from .checksums import checksum_like
from .sets import StoredSet

__all__ = ["FetchedFile", "SetRefused", "fetch_set", "PART_SUFFIX", "RECORD_SUFFIX"]

log = logging.getLogger("trainvisor.download")

PART_SUFFIX = ".part"
RECORD_SUFFIX = ".part.json"


class SetRefused(ReadError):
    """The set's objects do not match its manifest: nothing was moved into place."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True)
class FetchedFile:
    """One file of the set, verified and in place. `received`: bytes this call read from the
    store; `resumed_from`: the length of the part it continued (0: read from the start)."""

    relpath: str
    path: str
    size: int
    received: int
    resumed_from: int


def fetch_set(reader: StoreReader, stored: StoredSet, out_dir: Path, *, progress: Optional[Progress] = None,
              retries: int = 3, sleep: Callable[[float], object] = time.sleep) -> tuple[FetchedFile, ...]:
    """Receive, verify, then move every file of the set under `out_dir`. A retryable read
    error is retried `retries` times from the part's length; what stops this call (an error, a
    kill, `progress` raising) leaves the parts for the next call to continue. SetRefused when a
    file differs from the manifest."""
    manifest = stored.manifest
    targets = [(entry, _target(out_dir, entry.relpath)) for entry in manifest.files]
    fetched, refused = [], []
    for (entry, target), key in zip(targets, stored.keys):
        got = _receive(reader, entry, key, target, progress, retries, sleep)
        why = _difference(_part(target), entry)
        if why is None:
            fetched.append(got)
            continue
        refused.append(f"{entry.relpath}: {why}")
        _part(target).unlink(missing_ok=True)  # wrong bytes: never to be continued
        _record(target).unlink(missing_ok=True)
    if refused:
        raise SetRefused(f"set {manifest.name} refused, nothing moved into {out_dir}: {'; '.join(refused)}")
    for _entry, target in targets:
        os.replace(_part(target), target)
        _record(target).unlink(missing_ok=True)
    return tuple(fetched)


def _part(target: Path) -> Path:
    return target.with_name(target.name + PART_SUFFIX)


def _record(target: Path) -> Path:
    return target.with_name(target.name + RECORD_SUFFIX)


def _target(out_dir: Path, relpath: str) -> Path:
    """Where `relpath` goes; a manifest naming a path outside `out_dir` is refused."""
    root = out_dir.resolve()
    target = (root / relpath).resolve()
    if os.path.isabs(relpath) or root not in target.parents:
        raise SetRefused(f"{relpath}: the manifest names a path outside {out_dir}")
    return target


def _wanted(entry: ManifestEntry) -> dict:
    return {"key": entry.key, "size": entry.size, "checksum": entry.checksum}


def _resume_offset(entry: ManifestEntry, target: Path) -> int:
    """The length of a part this object's version left, else 0 (and a fresh record)."""
    part, record = _part(target), _record(target)
    try:
        same = json.loads(record.read_text()) == _wanted(entry)
        length = part.stat().st_size
    except (OSError, ValueError):
        same, length = False, 0
    if same and length <= entry.size:
        return length
    target.parent.mkdir(parents=True, exist_ok=True)
    part.unlink(missing_ok=True)
    record.write_text(json.dumps(_wanted(entry)))
    return 0


def _receive(reader: StoreReader, entry: ManifestEntry, key: str, target: Path, progress: Optional[Progress],
             retries: int, sleep: Callable[[float], object]) -> FetchedFile:
    start = offset = _resume_offset(entry, target)
    if start:
        log.info("%s: continuing from byte %d of %d", entry.relpath, start, entry.size)
    attempt = 0
    while offset < entry.size:
        try:
            offset = _append(reader, key, _part(target), offset, progress)
            break
        except ReadError as exc:
            if not exc.retryable or attempt >= retries:
                raise
            attempt += 1
            offset = _part(target).stat().st_size
            delay = min(30.0, 0.5 * 2 ** attempt)
            log.warning("%s: %s; attempt %d, continuing from byte %d in %.1f s", entry.relpath, exc, attempt,
                        offset, delay)
            sleep(delay)
    if offset == start == 0 and entry.size == 0:
        _part(target).touch()
    return FetchedFile(entry.relpath, str(target), entry.size, offset - start, start)


def _append(reader: StoreReader, key: str, part: Path, offset: int, progress: Optional[Progress]) -> int:
    """Append the object's bytes from `offset` to `part`; the new length."""
    pieces = reader.read_object(key, offset)
    try:
        with open(part, "ab") as out:
            for chunk in pieces:
                out.write(chunk)
                offset += len(chunk)
                if progress is not None:
                    progress(len(chunk))
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    return offset


def _difference(part: Path, entry: ManifestEntry) -> Optional[str]:
    """What differs between the received bytes and the manifest, or None."""
    size = part.stat().st_size
    if size != entry.size:
        return f"size {entry.size} in the manifest, {size} received"
    try:
        got = checksum_like(str(part), entry.checksum)
    except ValueError as exc:
        return str(exc)
    if got != entry.checksum:
        return f"checksum {entry.checksum} in the manifest, {got} received"
    return None
