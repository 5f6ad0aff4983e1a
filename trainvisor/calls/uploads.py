"""Files or directories, once, from Python: `upload` is `trainvisor upload PATH... --to URL`,
through the machinery a run's checkpoints go through (journal, retries, verification,
resumable parts).

The default run directory is derived from the destination and the paths, so calling again with
the same arguments after a crash resumes: verified files are skipped, a half-sent large file
continues from its recorded parts.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional, TextIO, Union

from ..errors import ConfigError
from ..events import Checkpoint, CheckpointFile
from ..uploaders.destinations import FILE_KEYS, Destination, parse_destination

__all__ = ["UploadReport", "upload", "files_to_upload", "default_run_dir"]

PathArg = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class UploadReport:
    """What one `upload` did. `files_sent`/`bytes_sent`: uploaded now; `files_skipped`/
    `bytes_skipped`: found verified in the store in their current version, not sent again.
    `verified`, `failed`, `pending`: the object keys in each state when it returned (pending only
    when an upload was cut short: it is resumed by the same call again)."""

    destination: str
    run_dir: str
    files_sent: int
    bytes_sent: int
    files_skipped: int
    bytes_skipped: int
    verified: tuple[str, ...]
    failed: tuple[str, ...]
    pending: tuple[str, ...]
    seconds: float
    limiter_wait: float = 0.0
    """Seconds the uploads waited on `rate_limit` (summed over workers)."""

    @property
    def ok(self) -> bool:
        return not self.failed and not self.pending


def files_to_upload(paths: Iterable[PathArg]) -> Iterator[CheckpointFile]:
    """A file keeps its name; a directory's files keep their path relative to it."""
    for raw in paths:
        path = Path(raw).absolute()
        if path.is_file():
            yield CheckpointFile(path=str(path), relpath=path.name)
        elif path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                yield CheckpointFile(path=str(child), relpath=str(child.relative_to(path)))
        else:
            raise ConfigError(f"{os.fspath(raw)}: no such file or directory")


def default_run_dir(url: str, files: list[CheckpointFile]) -> Path:
    """`trainvisor-runs/upload-<hash of URL and paths>`: the same upload, the same journal."""
    digest = hashlib.sha1("\0".join([url, *(f.path for f in files)]).encode()).hexdigest()[:12]
    return Path("trainvisor-runs") / f"upload-{digest}"


def upload(
    paths: "PathArg | Iterable[PathArg]",
    to: "str | Destination",
    *,
    prefix: Optional[str] = None,
    concurrency: int = 2,
    retries: int = 10,
    credentials: Optional[str] = None,
    run_dir: Optional[PathArg] = None,
    progress: Optional[TextIO] = None,
    quiet: bool = False,
    clock: Callable[[], float] = time.monotonic,
    rate_limit: "str | float" = 0,
) -> UploadReport:
    """Upload `paths` (files, or directories: their files) to `to` (file:///path,
    s3://bucket/prefix, kodo://bucket/prefix; or a `Destination` read already) once, verified.

    `prefix`: what keys start with (default: the URL's path); a file's key is prefix/relative
    path. `retries`: per file, on retryable errors (backoff up to 30 s). `credentials`: a
    KEY=value file whose keys win over the environment. `run_dir`: journal, resume records and
    the log (default: ./trainvisor-runs/upload-<hash>). `progress`: a stream to show bytes, rate
    and ETA on. `quiet`: warnings go only to the run log, not to stderr. `rate_limit`: bytes per
    second for all files together (`50MB/s`, or a number; 0: unlimited).

    ConfigError (one line) for a bad URL, path or option; an unusable destination raises from
    its check (a probe object) before anything is sent. A file that fails for good is in
    `failed`, not raised.
    """
    dest = to if isinstance(to, Destination) else parse_destination(to, setting="upload(to=...)")
    if not _whole(concurrency) or not 1 <= concurrency <= 64:
        raise ConfigError(f"upload(concurrency=...) must be a whole number from 1 to 64, got {concurrency!r}")
    if not _whole(retries) or retries < 0:
        raise ConfigError(f"upload(retries=...) must be a whole number, 0 or more, got {retries!r}")
    try:
        limiter = _limiter(rate_limit)
    except ValueError as exc:
        raise ConfigError(f"upload(rate_limit=...): {exc}") from None
    files = list(files_to_upload([paths] if isinstance(paths, (str, os.PathLike)) else paths))
    if not files:
        raise ConfigError("nothing to upload: the given directories are empty")
    rd = Path(run_dir) if run_dir is not None else default_run_dir(dest.url, files)
    rd.mkdir(parents=True, exist_ok=True)
    from ..run.logsetup import RunLogging

    logging_ = RunLogging.start(rd, quiet=quiet)
    try:
        return _send(dest, files, rd, prefix=dest.prefix if prefix is None else prefix.strip("/"),
                     concurrency=concurrency, retries=retries, credentials=credentials, progress=progress, clock=clock,
                     limiter=limiter)
    finally:
        logging_.close()


def _limiter(rate_limit: "str | float"):
    from ..uploaders.ratelimit import TokenBucket, parse_rate

    rate = parse_rate(rate_limit)
    return TokenBucket(rate) if rate > 0 else None


def _whole(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool)


def _send(dest: Destination, files: list[CheckpointFile], rd: Path, *, prefix: str, concurrency: int,
          retries: int, credentials: Optional[str], progress: Optional[TextIO],
          clock: Callable[[], float], limiter=None) -> UploadReport:
    """Open, check (a probe), submit every file as a set of its own, wait until nothing is pending."""
    from ..run.progress import drain_showing_progress
    from ..uploaders import open_uploader
    from ..uploaders.manager import RetryPolicy, UploadManager

    uploader = open_uploader(dest.url, state_dir=str(rd), credentials=credentials)
    manager = UploadManager(uploader, run_dir=str(rd), run_id="", prefix=prefix, key_template=FILE_KEYS,
                            concurrency=concurrency, manifests=False, retry=RetryPolicy(attempts=retries + 1),
                            limiter=limiter)
    try:
        manager.preflight()
        start = clock()
        for f in files:
            manager.submit(Checkpoint(name=f.relpath, files=(f,), iteration=None, epoch=None,
                                      root=os.path.dirname(f.path), framework="file"))
        report = drain_showing_progress(manager, None, progress, clock=clock)
        seconds = clock() - start
        p = manager.progress()
    finally:
        manager.close()
    return UploadReport(destination=dest.shown, run_dir=str(rd), files_sent=p.files_sent, bytes_sent=p.bytes_sent,
                        files_skipped=p.files_skipped, bytes_skipped=p.bytes_skipped, verified=report.verified,
                        failed=report.failed, pending=report.pending, seconds=seconds, limiter_wait=p.limiter_wait)
