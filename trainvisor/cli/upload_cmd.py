"""`trainvisor upload PATH... --to URL`: flags -> `trainvisor.upload` (calls/uploads.py: files
or directories, once, through the checkpoint upload machinery) -> what it did, on stderr.

The default run directory is derived from the destination and the paths, so running the same
command again after it was killed resumes it: verified files are skipped, a half-sent large file
continues from its recorded parts.
"""
from __future__ import annotations

import sys
from typing import Optional

import click

from .. import defaults
from ..calls.uploads import files_to_upload
from ..run.progress import human_bytes

__all__ = ["upload", "files_to_upload"]


def _rate(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    from ..uploaders.ratelimit import parse_rate

    try:
        parse_rate(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.command("upload")
@click.argument("paths", metavar="PATH...", nargs=-1, required=True, type=click.Path())
@click.option("--to", "url", required=True, metavar="URL",
              help="file:///path, s3://bucket/prefix or kodo://bucket/prefix.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Journal and resume records. Default: ./trainvisor-runs/upload-<hash of URL and paths>, "
                   "so the same command run again resumes.")
@click.option("--concurrency", type=click.IntRange(1, 64), default=defaults.UPLOAD_CONCURRENCY, show_default=True,
              help="Files uploaded at once.")
@click.option("--retries", type=click.IntRange(0, None), default=10, show_default=True,
              help="Retries per file on retryable errors (backoff up to 30 s); run the command again to resume.")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A file of KEY=value lines (QINIU_ACCESS_KEY, AWS_SECRET_ACCESS_KEY, ...); wins over the environment.")
@click.option("--rate-limit", default="0", show_default=True, metavar="RATE", callback=_rate,
              help="Bytes per second for all files together (50MB/s, 800KiB/s); 0: unlimited.")
@click.option("--progress/--no-progress", default=None,
              help="Show bytes, rate and ETA (default: when stderr is a terminal).")
def upload(paths: tuple[str, ...], url: str, run_dir: Optional[str], concurrency: int, retries: int,
           credentials: Optional[str], progress: Optional[bool], rate_limit: str) -> None:
    """Upload files or directories once, verified, resumable after a crash."""
    from ..calls.uploads import upload as upload_files
    from ..uploaders.destinations import parse_destination

    show = sys.stderr.isatty() if progress is None else progress
    report = upload_files(paths, to=parse_destination(url, setting="--to"), run_dir=run_dir, concurrency=concurrency,
                          retries=retries, credentials=credentials, progress=sys.stderr if show else None,
                          rate_limit=rate_limit)
    # What was sent, and apart from it what the store already held: a rerun that sends nothing says so.
    skipped = f"; {report.files_skipped} already in the store, verified, not sent" if report.files_skipped else ""
    waited = f"; {report.limiter_wait:.1f} s waited on --rate-limit" if report.limiter_wait >= 0.05 else ""
    click.echo(f"uploaded {report.files_sent} file(s), {human_bytes(report.bytes_sent)}, "
               f"in {report.seconds:.1f} s{skipped}{waited}", err=True)
    for key in report.failed:
        click.echo(f"trainvisor: upload failed: {key} (details in {report.run_dir}/train.log)", err=True)
    if report.failed:
        sys.exit(3)
