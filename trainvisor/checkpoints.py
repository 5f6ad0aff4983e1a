"""The one serialisation of a `Checkpoint` and of its upload `Manifest`.

A checkpoint is written in three places (the upload journal, so a restart re-submits whole
sets; RUN_DIR/checkpoints.jsonl, the record of hand-overs; the manifest uploaded after a set's
files) and read back from the first two. Keeping the field names here means a reader of one
always understands the others.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from .events import Checkpoint, CheckpointFile, json_safe

__all__ = ["checkpoint_to_dict", "checkpoint_from_dict", "ManifestEntry", "Manifest"]


def checkpoint_to_dict(cp: Checkpoint) -> dict[str, Any]:
    """A JSON-ready dict: name, framework, iteration, epoch, root, files [{path, relpath}]."""
    return {"name": cp.name, "framework": cp.framework, "iteration": cp.iteration,
            "epoch": json_safe(cp.epoch), "root": cp.root,
            "files": [{"path": f.path, "relpath": f.relpath} for f in cp.files]}


def _file_from(item: Any) -> CheckpointFile:
    if isinstance(item, Mapping):
        return CheckpointFile(path=item["path"], relpath=item["relpath"])
    path, relpath = item  # journals written before this module stored [path, relpath] pairs
    return CheckpointFile(path=path, relpath=relpath)


def checkpoint_from_dict(d: Mapping[str, Any]) -> Checkpoint:
    """The inverse of `checkpoint_to_dict`; extra keys (sizes, wall_time) are ignored."""
    epoch = d.get("epoch")
    return Checkpoint(name=d["name"], files=tuple(_file_from(f) for f in d["files"]),
                      iteration=d.get("iteration"), epoch=None if epoch is None else float(epoch),
                      root=d["root"], framework=d.get("framework") or "")


@dataclass(frozen=True)
class ManifestEntry:
    """One verified file of a set: where it came from, its key, and what the store holds."""

    relpath: str
    key: str
    size: int
    checksum: str

    @property
    def checksum_kind(self) -> str:
        """Which checksum the store verified the file with (`sha256`, `crc32c`, `crc32`, `etag`,
        `qetag`): the part of `checksum` before its colon, in old manifests as in new ones, so
        the stored format needs no field of its own."""
        return self.checksum.partition(":")[0]


@dataclass(frozen=True)
class Manifest:
    """Uploaded last, after every file of the set is verified: its presence in the store
    says the set is whole. The JSON field names are part of the stored format."""

    run_id: str
    name: str
    iteration: Optional[int]
    epoch: Optional[float]
    framework: str
    files: tuple[ManifestEntry, ...]

    @classmethod
    def of(cls, run_id: str, cp: Checkpoint, files: tuple[ManifestEntry, ...]) -> "Manifest":
        return cls(run_id, cp.name, cp.iteration, cp.epoch, cp.framework, files)

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "name": self.name, "iteration": self.iteration,
                           "epoch": json_safe(self.epoch), "framework": self.framework,
                           "files": [{"relpath": f.relpath, "key": f.key, "size": f.size,
                                      "checksum": f.checksum} for f in self.files]}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> "Manifest":
        d = json.loads(text)
        files = tuple(ManifestEntry(f["relpath"], f["key"], f["size"], f["checksum"]) for f in d["files"])
        return cls(d["run_id"], d["name"], d.get("iteration"), d.get("epoch"), d.get("framework") or "", files)
