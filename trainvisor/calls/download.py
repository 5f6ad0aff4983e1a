"""A checkpoint set from a store, from Python: `download` is `trainvisor download URL -o DIR`.

The sets are found by their manifests (uploaders/sets.py: which is newest, which is complete)
and fetched verified and resumable (uploaders/fetch.py): calling again after an interruption
continues each file from what it received. A person seeds a new machine with it; a restarted
training fetches its latest verified checkpoint with it.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from ..errors import ConfigError
from ..uploaders.destinations import Destination, parse_destination

__all__ = ["DownloadReport", "download"]

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class DownloadReport:
    """What one `download` did. `set`: the set's name, `manifest_key` where its manifest is;
    `files`: the local paths, all verified against the manifest and in place; `bytes`: bytes
    received by this call; `resumed`: the relative paths continued from an earlier attempt's part;
    `passed_over`: newer sets that were not complete, one line each (name: what is missing)."""

    source: str
    set: str
    manifest_key: str
    out_dir: str
    iteration: Optional[int]
    epoch: Optional[float]
    files: tuple[str, ...]
    bytes: int
    resumed: tuple[str, ...]
    seconds: float
    passed_over: tuple[str, ...] = ()
    verified: bool = True
    """Always True: a set that does not verify raises (SetRefused) instead of being reported."""


def download(
    url: "str | Destination",
    out_dir: PathArg,
    *,
    latest: bool = True,
    set_name: Optional[str] = None,
    credentials: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    progress: Optional[Callable[[int], None]] = None,
    retries: int = 3,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
    node: Optional[int] = None,
) -> DownloadReport:
    """Fetch one checkpoint set from `url` (file:///path, s3://bucket/prefix,
    kodo://bucket/prefix: where a run uploaded, or down to one run's folder) into `out_dir`.

    `latest` (the default): the newest complete set (its manifest's iteration, then epoch, then
    when it was stored); `set_name`: the set of that name instead. `credentials`: a KEY=value
    file whose keys win over `env` (default: the environment). `progress`: called with the
    bytes of each piece received. `retries`: per file, on retryable read errors (a dropped
    connection: continued from what was received, after a backoff `sleep`).

    Raises a one-line error: ConfigError (a bad URL or option), SetChoiceError (no set, none
    complete, no such name), SetRefused (a file differs from its manifest: nothing is moved
    into place), ReadError (the store failed).

    A run of several nodes (`<run>/node-<n>/...`): `latest` is the newest set whole on every node
    that wrote sets; `node` says whose copy is fetched (default: the lowest node's).
    """
    dest = url if isinstance(url, Destination) else parse_destination(url, setting="download(url=...)")
    if set_name is None and not latest:
        raise ConfigError("download needs latest=True or a set_name")
    if set_name is not None and not set_name.strip():
        raise ConfigError("download(set_name=...) must name a set")
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ConfigError(f"download(retries=...) must be a whole number, 0 or more, got {retries!r}")
    if node is not None and (not isinstance(node, int) or isinstance(node, bool) or node < 0):
        raise ConfigError(f"download(node=...) must be a whole number, 0 or more, got {node!r}")
    reader = _open_reader(dest, credentials, env)
    from ..uploaders.fetch import fetch_set
    from ..uploaders.sets import list_sets, named_set, newest_complete, passed_over

    start = clock()
    prefix = f"{dest.prefix}/" if dest.prefix else ""
    sets = list_sets(reader, prefix)
    chosen = (newest_complete(sets, dest.shown, node) if set_name is None
              else named_set(sets, set_name, dest.shown, node))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fetched = fetch_set(reader, chosen, out, progress=progress, retries=retries, sleep=sleep)
    newer = passed_over(sets, chosen) if set_name is None else ()
    m = chosen.manifest
    return DownloadReport(source=dest.shown, set=m.name, manifest_key=chosen.manifest_key, out_dir=str(out),
                          iteration=m.iteration, epoch=m.epoch, files=tuple(f.path for f in fetched),
                          bytes=sum(f.received for f in fetched),
                          resumed=tuple(f.relpath for f in fetched if f.resumed_from),
                          seconds=clock() - start,
                          passed_over=tuple(f"{s.name}: {'; '.join(s.differences)}" for s in newer))


def _open_reader(dest: Destination, credentials: Optional[str], env: Optional[Mapping[str, str]]):
    """The destination's uploader, which reads too; one that cannot is refused in one line."""
    from ..uploaders import open_uploader

    reader = open_uploader(dest.url, credentials=credentials, env=env)
    if not all(callable(getattr(reader, m, None)) for m in ("list_objects", "read_object")):
        raise ConfigError(f"{dest.shown}: this destination cannot be read back (it has no list_objects/read_object)")
    return reader
