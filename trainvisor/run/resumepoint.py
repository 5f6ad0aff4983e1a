"""Where a restarted training resumes from: the newest complete checkpoint set, as files on this
machine that are known to be whole, and the arguments that hand it to the command.

The run's own record says which sets were complete (RUN_DIR/checkpoints.jsonl, newest last) and,
once a set was uploaded, what its files are (the manifest the upload manager kept beside the
journal, RUN_DIR/.NAME.manifest.json: sizes and the store's checksums). The newest set is used
where it lies when every file is still there and matches; otherwise the store's newest complete
set is downloaded and verified against its manifest before use (`calls.download`); a copy that
does not verify is refused, said in one line, and an older local set that does is used instead.
Nothing here starts a process: `find_resume_point` returns a `ResumePoint` and what it decided,
`resume_args` turns it into argv words.
"""
from __future__ import annotations

import json
import logging
import os
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

from ..checkpoints import Manifest
from ..errors import ConfigError, TrainvisorError

__all__ = ["ResumePoint", "LocalSet", "local_sets", "local_difference", "find_resume_point", "resume_args",
           "check_template", "folder_url"]

log = logging.getLogger("trainvisor")

RESUMED_DIR = "resumed"  # RUN_DIR/resumed/NAME: a set downloaded to resume from


@dataclass(frozen=True)
class ResumePoint:
    """A complete checkpoint set on this machine: `files` are local paths, each checked (sizes,
    and checksums when a manifest says them); `source`: "local", or the store it came from
    (its password masked)."""

    name: str
    iteration: Optional[int]
    epoch: Optional[float]
    files: tuple[str, ...]
    source: str = "local"


@dataclass(frozen=True)
class LocalSet:
    """One set as checkpoints.jsonl recorded it: (path, relpath, size when recorded) per file."""

    name: str
    iteration: Optional[int]
    epoch: Optional[float]
    files: tuple[tuple[str, str, Optional[int]], ...]


@dataclass(frozen=True)
class ResumeDecision:
    """What `find_resume_point` chose (None: start from the beginning) and why, one line each."""

    point: Optional[ResumePoint]
    said: tuple[str, ...]


def local_sets(run_dir: "str | os.PathLike[str]") -> list[LocalSet]:
    """The sets checkpoints.jsonl records, newest first (iteration, then epoch, then the later
    record); a set recorded twice counts once, as last recorded. A damaged line is skipped."""
    found: dict[str, tuple[int, LocalSet]] = {}
    try:
        with open(Path(run_dir) / "checkpoints.jsonl", encoding="utf-8") as fh:
            lines = fh.readlines()
    except OSError:
        return []
    for order, line in enumerate(lines):
        try:
            rec = json.loads(line)
            files = tuple((f["path"], f["relpath"], f.get("size")) for f in rec["files"])
            found[rec["name"]] = (order, LocalSet(rec["name"], rec.get("iteration"), rec.get("epoch"), files))
        except (ValueError, KeyError, TypeError):
            continue
    ranked = sorted(found.values(), key=lambda o: (_num(o[1].iteration), _num(o[1].epoch), o[0]), reverse=True)
    return [s for _order, s in ranked]


def _num(value: object) -> float:
    return float(value) if isinstance(value, (int, float)) else float("-inf")


def local_difference(run_dir: "str | os.PathLike[str]", cp: LocalSet) -> Optional[str]:
    """Why the local copy of `cp` cannot be resumed from (a file gone, a size or checksum that is
    not the manifest's), or None when every file is whole."""
    manifest = _local_manifest(run_dir, cp.name)
    entries = {e.relpath: e for e in manifest.files} if manifest is not None else {}
    for path, relpath, size in cp.files:
        try:
            actual = os.path.getsize(path)
        except OSError:
            return f"{path} is gone"
        entry = entries.get(relpath)
        want = entry.size if entry is not None else size
        if want is not None and actual != want:
            return f"{path} has {actual} bytes, {'its manifest says' if entry else 'it was complete at'} {want}"
        if entry is not None and not _checksum_matches(path, entry.checksum):
            return f"{path} does not match its manifest's checksum {entry.checksum}"
    return None


def _local_manifest(run_dir: "str | os.PathLike[str]", name: str) -> Optional[Manifest]:
    """The manifest the upload manager wrote for `name` before uploading it (no upload: None)."""
    try:
        return Manifest.from_json((Path(run_dir) / f".{name}.manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _checksum_matches(path: str, recorded: str) -> bool:
    from ..uploaders.checksums import checksum_like

    try:
        return checksum_like(path, recorded) == recorded
    except (OSError, ValueError):
        return False


def find_resume_point(run_dir: "str | os.PathLike[str]", *, stores: Sequence[str] = (),
                      credentials: Optional[str] = None, download: Optional[Callable[..., object]] = None,
                      before_store: Optional[Callable[[], object]] = None,
                      node: Optional[int] = None) -> ResumeDecision:
    """The newest complete set: local when whole, else the first of `stores` that has one
    (downloaded into RUN_DIR/resumed/NAME, verified), else the newest older local set that is
    whole. `before_store` runs before a store is read (the run waits for its uploads in flight).
    `node`: a run of several nodes takes the newest set whole on every node, its own node's copy."""
    sets = local_sets(run_dir)
    said: list[str] = []
    if sets:
        why = local_difference(run_dir, sets[0])
        if why is None:
            return ResumeDecision(_local(sets[0]), (f"resuming from {sets[0].name} (local copy verified)",))
        said.append(f"the local copy of {sets[0].name} cannot be used: {why}")
    if stores and before_store is not None:
        before_store()
    for store in stores:
        point, line = _from_store(run_dir, store, credentials, download, node)
        said.append(line)
        if point is not None:
            return ResumeDecision(point, tuple(said))
    for older in sets[1:]:
        if local_difference(run_dir, older) is None:
            said.append(f"resuming from the older {older.name} (local copy verified)")
            return ResumeDecision(_local(older), tuple(said))
    said.append("no complete checkpoint to resume from: the training starts from the beginning")
    return ResumeDecision(None, tuple(said))


def _local(cp: LocalSet) -> ResumePoint:
    return ResumePoint(cp.name, cp.iteration, cp.epoch, tuple(path for path, _rel, _size in cp.files))


def _from_store(run_dir, store: str, credentials: Optional[str], download: Optional[Callable[..., object]],
                node: Optional[int] = None) -> tuple[Optional[ResumePoint], str]:
    """The store's newest complete set, downloaded and verified; a refusal in one line."""
    from ..secrets import mask_url
    from ..uploaders.destinations import parse_destination
    from ..uploaders.sets import SetChoiceError

    if download is None:
        from ..calls.download import download
    shown = mask_url(store)
    try:
        dest = parse_destination(store, setting="restart.resume_from")
        staging = Path(run_dir) / RESUMED_DIR / "incoming"
        mine = {} if node is None else {"node": node}  # a one-machine run calls as it always did
        report = download(dest, staging, latest=True, credentials=credentials, **mine)
    except SetChoiceError as exc:  # nothing complete there (yet): not a refusal
        return None, f"no checkpoint to resume from in {shown}: {mask_url(str(exc))}"
    except (TrainvisorError, OSError) as exc:
        return None, f"the store's newest checkpoint was refused, not used ({shown}): {mask_url(str(exc))}"
    final = Path(run_dir) / RESUMED_DIR / report.set  # type: ignore[attr-defined]
    if final.exists():
        import shutil

        shutil.rmtree(final)
    os.replace(staging, final)
    files = tuple(str(final / os.path.relpath(f, staging)) for f in report.files)  # type: ignore[attr-defined]
    point = ResumePoint(report.set, report.iteration, report.epoch, files, source=shown)  # type: ignore[attr-defined]
    return point, f"resuming from {report.set} downloaded from {shown} (verified against its manifest)"


def folder_url(url: str, key: str) -> str:
    """`url` narrowed to the folder of `key` (one of the run's object keys): s3://b/backups and
    backups/r1/x.pth give s3://b/backups/r1. A key outside the URL's prefix: `url` as given."""
    from urllib.parse import urlsplit, urlunsplit

    from ..uploaders.destinations import key_prefix

    folder, base = key.rpartition("/")[0], key_prefix(url)
    if base and not (folder == base or folder.startswith(base + "/")):
        return url
    inner = folder[len(base):].strip("/")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + inner)) if inner else url


def check_template(template: str) -> None:
    """A resume_arg's fields are {latest}, {latest.EXT} and {latest_dir}: a ConfigError now for
    anything else (the config's own check, for a caller who built no RunConfig)."""
    from ..config.settings import resume_template

    problem = resume_template(template)
    if problem:
        raise ConfigError(f"restart.resume_arg {template!r} {problem}")


def resume_args(template: str, point: ResumePoint) -> list[str]:
    """The words appended to the command: `template` split like a shell line (quotes kept
    together), each field filled. ConfigError when {latest.EXT} names no file of the set."""
    import shlex

    return [_fill(word, point) for word in shlex.split(template)]


def _fill(word: str, point: ResumePoint) -> str:
    out = []
    for text, field, _spec, _conv in string.Formatter().parse(word):
        out.append(text)
        if field is None:
            continue
        if field == "latest_dir":
            out.append(os.path.dirname(point.files[0]))
        elif field == "latest":
            out.append(point.files[0])
        else:
            ext = "." + field.split(".", 1)[1]
            match = [f for f in point.files if f.endswith(ext)]
            if not match:
                raise ConfigError(f"restart.resume_arg: checkpoint {point.name} has no file ending in {ext} "
                                  f"(its files: {', '.join(os.path.basename(f) for f in point.files)})")
            out.append(match[0])
    return "".join(out)
