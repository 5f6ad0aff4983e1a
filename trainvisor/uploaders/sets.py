"""The checkpoint sets a store holds, read back from their manifests (`trainvisor download`).

A run uploads each set's files, then its manifest (`<prefix>/<run>/<name>.manifest.json`), so a
manifest in the store says the set was whole when it was written. Whether it still is, is a
question for the listing: a set is *complete* when every file its manifest names is listed with
the manifest's size. Its bytes are checked only when downloaded (fetch.py).

A set's files are looked for beside its manifest, under their relative paths (the layout a run
uploads), not under the manifest's recorded keys: those are keys from the store's root at upload
time, and a file:// URL naming the run's folder (or a store copied elsewhere) has another root.

"Newest" is the manifest's iteration, then its epoch, then when the manifest was stored: what
the training says first, the store's clock only to break ties (a set with no iteration sorts
before one with any). Each set keeps its `folder` (the manifest key's directory: the run), so
runs that store sets per node (`<prefix>/<run>/node-<n>/...`) can later be grouped by run and
name to find the newest set complete on every node that wrote one.
"""
from __future__ import annotations

import logging
import posixpath
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from ..checkpoints import Manifest
from .base import ReadError, StoredObject, StoreReader

__all__ = ["StoredSet", "MANIFEST_SUFFIX", "list_sets", "newest_complete", "passed_over", "named_set",
           "SetChoiceError"]

log = logging.getLogger("trainvisor.download")

MANIFEST_SUFFIX = ".manifest.json"
_MANIFEST_LIMIT = 16 << 20  # a manifest lists files; one this large is not ours


class SetChoiceError(ReadError):
    """No set answers the request (none at all, none complete, no such name, a name in several runs)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


@dataclass(frozen=True)
class StoredSet:
    """One manifest in the store and what the listing says of its files."""

    manifest_key: str
    manifest: Manifest
    stored: float
    """When the manifest was stored (seconds since the epoch, the store's clock)."""
    keys: tuple[str, ...]
    """Where each of the manifest's files is in the store (in the manifest's order)."""
    differences: tuple[str, ...]
    """One line per file the listing does not hold as the manifest says (missing, another size)."""

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def folder(self) -> str:
        return posixpath.dirname(self.manifest_key)

    @property
    def complete(self) -> bool:
        return not self.differences

    def order(self) -> tuple:
        """What sorts sets oldest to newest: iteration, then epoch (a set with one after any
        without), then when the manifest was stored."""
        m = self.manifest
        return (m.iteration is not None, m.iteration or 0, m.epoch is not None, m.epoch or 0.0, self.stored)


def list_sets(reader: StoreReader, prefix: str) -> tuple[StoredSet, ...]:
    """Every set whose manifest is under `prefix`, oldest first. A manifest that cannot be read
    as one is logged and left out (a foreign object that happens to end in .manifest.json)."""
    objects = {o.key: o for o in reader.list_objects(prefix)}
    sets = []
    for key in sorted(k for k in objects if k.endswith(MANIFEST_SUFFIX)):
        manifest = _read_manifest(reader, objects[key])
        if manifest is not None:
            keys = tuple(posixpath.join(posixpath.dirname(key), f.relpath) for f in manifest.files)
            sets.append(StoredSet(key, manifest, objects[key].modified, keys, _differences(manifest, keys, objects)))
    return tuple(sorted(sets, key=StoredSet.order))


def _read_manifest(reader: StoreReader, obj: StoredObject) -> Optional[Manifest]:
    if obj.size > _MANIFEST_LIMIT:
        log.warning("%s is too large to be a manifest (%d bytes): skipped", obj.key, obj.size)
        return None
    pieces = reader.read_object(obj.key)
    try:
        data = b"".join(pieces)
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()
    try:
        return Manifest.from_json(data.decode("utf-8"))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:  # UnicodeDecodeError is a ValueError
        log.warning("%s is not a manifest trainvisor can read (%s): skipped", obj.key, exc)
        return None


def _differences(manifest: Manifest, keys: tuple[str, ...],
                 objects: Mapping[str, StoredObject]) -> tuple[str, ...]:
    out = []
    for entry, key in zip(manifest.files, keys):
        obj = objects.get(key)
        if obj is None:
            out.append(f"{entry.relpath}: missing from the store ({key})")
        elif obj.size != entry.size:
            out.append(f"{entry.relpath}: size {entry.size} in the manifest, {obj.size} in the store")
    return tuple(out)


def newest_complete(sets: Iterable[StoredSet], where: str) -> StoredSet:
    """The newest complete set (`passed_over` tells the newer incomplete ones). SetChoiceError
    when there is none."""
    sets = tuple(sets)
    for s in reversed(sets):
        if s.complete:
            return s
    if not sets:
        raise SetChoiceError(f"no checkpoint set under {where} (no *{MANIFEST_SUFFIX} found)")
    newest = sets[-1]
    raise SetChoiceError(f"no complete checkpoint set under {where}: {len(sets)} found, none whole "
                         f"(newest, {newest.name}: {newest.differences[0]})")


def passed_over(sets: Iterable[StoredSet], chosen: StoredSet) -> tuple[StoredSet, ...]:
    """The incomplete sets newer than `chosen`: what `newest_complete` had to pass over."""
    return tuple(s for s in sets if not s.complete and s.order() > chosen.order())


def named_set(sets: Iterable[StoredSet], name: str, where: str) -> StoredSet:
    """The set called `name`; refused when it is in several folders or not complete."""
    found = [s for s in sets if s.name == name]
    if not found:
        raise SetChoiceError(f"no checkpoint set named {name!r} under {where}")
    if len(found) > 1:
        raise SetChoiceError(f"set {name!r} is in {len(found)} places under {where} "
                             f"({', '.join(s.folder or '/' for s in found)}): name the run in the URL")
    chosen = found[0]
    if not chosen.complete:
        raise SetChoiceError(f"set {name!r} refused: {'; '.join(chosen.differences)}")
    return chosen

