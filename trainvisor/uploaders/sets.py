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
before one with any). Each set keeps its `folder` (the manifest key's directory: the run).

A run of several nodes stores each node's sets in its own folder (`<prefix>/<run>/node-<n>/...`:
every node writes sets of the same names). Such a set is one checkpoint of the whole run only
when each node wrote its part: the newest set is then the newest NAME complete in every node
folder of that run that holds any set (`node_of`), and the copy returned is that of the node
asked for, else of the lowest node. A node folder with no set yet is not known to the store, so
it cannot hold the choice back.
"""
from __future__ import annotations

import logging
import posixpath
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

from ..checkpoints import Manifest
from .base import ReadError, StoredObject, StoreReader

__all__ = ["StoredSet", "MANIFEST_SUFFIX", "list_sets", "newest_complete", "passed_over", "named_set",
           "SetChoiceError", "node_of"]

log = logging.getLogger("trainvisor.download")

MANIFEST_SUFFIX = ".manifest.json"
_MANIFEST_LIMIT = 16 << 20  # a manifest lists files; one this large is not ours
_NODE_FOLDER = re.compile(r"node-(\d+)")


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


def node_of(s: StoredSet) -> tuple[str, Optional[int]]:
    """The run folder of a set and its node: (`run`, n) for `run/node-<n>/NAME`, (folder, None)
    for a set outside node folders."""
    parent, base = posixpath.split(s.folder)
    m = _NODE_FOLDER.fullmatch(base)
    return (parent, int(m.group(1))) if m else (s.folder, None)


def newest_complete(sets: Iterable[StoredSet], where: str, node: Optional[int] = None) -> StoredSet:
    """The newest complete set (`passed_over` tells the newer incomplete ones); in node folders,
    the newest name complete on every node of its run, `node`'s copy (else the lowest node's).
    SetChoiceError when there is none."""
    sets = tuple(sets)
    _check_node(sets, node, where)
    eligible = _complete_everywhere(sets, node)
    if eligible:
        return eligible[-1]
    if not sets:
        raise SetChoiceError(f"no checkpoint set under {where} (no *{MANIFEST_SUFFIX} found)")
    if any(s.complete for s in sets):  # whole sets on some nodes, but no name whole on all of them
        raise SetChoiceError(f"no checkpoint set under {where} is complete on every node that wrote sets "
                             f"({len(sets)} found in {', '.join(sorted({s.folder for s in sets}))})")
    newest = sets[-1]
    raise SetChoiceError(f"no complete checkpoint set under {where}: {len(sets)} found, none whole "
                         f"(newest, {newest.name}: {newest.differences[0]})")


def _check_node(sets: tuple[StoredSet, ...], node: Optional[int], where: str) -> None:
    """A node asked for that wrote no set here is refused, never answered with another's copy."""
    nodes = {n for n in (node_of(s)[1] for s in sets) if n is not None}
    if node is not None and nodes and node not in nodes:
        raise SetChoiceError(f"no set of node {node} under {where} (nodes with sets: "
                             f"{', '.join(str(n) for n in sorted(nodes))})")


def _complete_everywhere(sets: tuple[StoredSet, ...], node: Optional[int]) -> list[StoredSet]:
    """The sets `newest_complete` may choose, oldest first: each complete set outside node
    folders; of a run's node folders, one copy of each name complete in all of them."""
    nodes: dict[str, set[int]] = {}
    copies: dict[tuple[str, str], dict[int, StoredSet]] = {}
    out = []
    for s in sets:
        run, n = node_of(s)
        if n is None:
            if s.complete:
                out.append(s)
            continue
        nodes.setdefault(run, set()).add(n)
        if s.complete:
            copies.setdefault((run, s.name), {})[n] = s
    for (run, _), held in copies.items():
        if set(held) == nodes[run]:
            out.append(held[node] if node in held else held[min(held)])
    return sorted(out, key=StoredSet.order)


def passed_over(sets: Iterable[StoredSet], chosen: StoredSet) -> tuple[StoredSet, ...]:
    """The incomplete sets newer than `chosen`: what `newest_complete` had to pass over."""
    return tuple(s for s in sets if not s.complete and s.order() > chosen.order())


def named_set(sets: Iterable[StoredSet], name: str, where: str, node: Optional[int] = None) -> StoredSet:
    """The set called `name`; refused when it is in several folders (but the node folders of one
    run: `node`'s copy, else the lowest node's) or not complete."""
    found = [s for s in sets if s.name == name]
    _check_node(tuple(found), node, where)
    if not found:
        raise SetChoiceError(f"no checkpoint set named {name!r} under {where}")
    places = {node_of(s) for s in found}
    if len(found) > 1 and len({run for run, _ in places}) == 1 and all(n is not None for _, n in places):
        found = [min(found, key=lambda s: (node_of(s)[1] != node, node_of(s)[1]))]
    if len(found) > 1:
        raise SetChoiceError(f"set {name!r} is in {len(found)} places under {where} "
                             f"({', '.join(s.folder or '/' for s in found)}): name the run in the URL")
    chosen = found[0]
    if not chosen.complete:
        raise SetChoiceError(f"set {name!r} refused: {'; '.join(chosen.differences)}")
    return chosen

