"""`trainvisor upload PATH... --to URL`: files or directories, once, through the checkpoint
upload machinery (journal, retries, verification, resumable parts).

The default run directory is derived from the destination and the paths, so running the same
command again after it was killed resumes it: verified files are skipped, a half-sent large file
continues from its recorded parts.
"""
from __future__ import annotations

import hashlib
import os
import sys
import time
from pathlib import Path
from typing import Iterator, Optional, TextIO

import click

from ..errors import ConfigError
from ..events import Checkpoint, CheckpointFile
from ..run.progress import drain_showing_progress, human_bytes

__all__ = ["upload", "files_to_upload"]


def files_to_upload(paths: tuple[str, ...]) -> Iterator[CheckpointFile]:
    """A file keeps its name; a directory's files keep their path relative to it."""
    for raw in paths:
        path = Path(raw).absolute()
        if path.is_file():
            yield CheckpointFile(path=str(path), relpath=path.name)
        elif path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                yield CheckpointFile(path=str(child), relpath=str(child.relative_to(path)))
        else:
            raise ConfigError(f"{raw}: no such file or directory")


def _default_run_dir(url: str, files: list[CheckpointFile]) -> Path:
    digest = hashlib.sha1("\0".join([url, *(f.path for f in files)]).encode()).hexdigest()[:12]
    return Path("trainvisor-runs") / f"upload-{digest}"


@click.command("upload")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option("--to", "url", required=True, metavar="URL",
              help="file:///path, s3://bucket/prefix or kodo://bucket/prefix.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Journal and resume records. Default: ./trainvisor-runs/upload-<hash of URL and paths>, "
                   "so the same command run again resumes.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=2, show_default=True,
              help="Files uploaded at once.")
@click.option("--retries", type=click.IntRange(0, None), default=10, show_default=True,
              help="Retries per file on retryable errors (backoff up to 30 s); run the command again to resume.")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A file of KEY=value lines (QINIU_ACCESS_KEY, AWS_SECRET_ACCESS_KEY, ...); wins over the environment.")
@click.option("--progress/--no-progress", default=None,
              help="Show bytes, rate and ETA (default: when stderr is a terminal).")
def upload(paths: tuple[str, ...], url: str, run_dir: Optional[str], concurrency: int, retries: int,
           credentials: Optional[str], progress: Optional[bool]) -> None:
    """Upload files or directories once, verified, resumable after a crash."""
    from urllib.parse import urlsplit

    from ..run.logsetup import RunLogging
    from ..uploaders import open_uploader
    from ..uploaders.manager import RetryPolicy, UploadManager

    files = list(files_to_upload(paths))
    if not files:
        raise ConfigError("nothing to upload: the given directories are empty")
    parts = urlsplit(url)
    if not parts.scheme:
        raise ConfigError(f"--to needs a URL such as file:///backups or s3://bucket/prefix, got {url!r}")
    rd = Path(run_dir) if run_dir else _default_run_dir(url, files)
    rd.mkdir(parents=True, exist_ok=True)
    logging_ = RunLogging.start(rd, quiet=False)
    try:
        uploader = open_uploader(url, state_dir=str(rd), credentials=credentials)
        prefix = parts.path.strip("/") if parts.scheme != "file" else ""
        manager = UploadManager(uploader, run_dir=str(rd), run_id="", prefix=prefix,
                                key_template="{prefix}/{relpath}", concurrency=concurrency, manifests=False,
                                retry=RetryPolicy(attempts=retries + 1))
        try:
            manager.preflight()
            for f in files:
                manager.submit(Checkpoint(name=f.relpath, files=(f,), iteration=None, epoch=None,
                                          root=os.path.dirname(f.path), framework="file"))
            report = _wait(manager, sys.stderr, sys.stderr.isatty() if progress is None else progress)
        finally:
            manager.close()
    finally:
        logging_.close()
    for key in report.failed:
        click.echo(f"trainvisor: upload failed: {key} (details in {rd / 'train.log'})", err=True)
    if report.failed:
        sys.exit(3)


def _wait(manager, out: TextIO, show: bool):
    """Drain until nothing is pending, with a progress line when asked."""
    start = time.monotonic()
    report = drain_showing_progress(manager, None, out if show else None)
    p = manager.progress()
    # What was sent, and apart from it what the store already held: a rerun that sends nothing says so.
    skipped = f"; {p.files_skipped} already in the store, verified, not sent" if p.files_skipped else ""
    click.echo(f"uploaded {p.files_sent} file(s), {human_bytes(p.bytes_sent)}, "
               f"in {time.monotonic() - start:.1f} s{skipped}", err=True)
    return report
