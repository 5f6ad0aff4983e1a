"""`trainvisor download URL [--latest | --set NAME] -o DIR`: flags -> `trainvisor.download`
(calls/download.py: a checkpoint set found by its manifest, fetched verified and resumable) ->
what it did, on stderr. Running the same command again after an interruption continues each
file from what it received; a file that differs from its manifest is refused (exit 3) and
nothing is moved into DIR."""
from __future__ import annotations

import logging
from typing import Optional

import click

__all__ = ["download"]


@click.command("download")
@click.argument("url", metavar="URL")
@click.option("-o", "--output", "out_dir", required=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Where the set's files go (created if missing), under their relative paths.")
@click.option("--latest", "latest", is_flag=True, default=False,
              help="The newest complete set (by iteration, then epoch, then time stored): the default.")
@click.option("--set", "set_name", default=None, metavar="NAME", help="The set of this name instead.")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="A file of KEY=value lines (QINIU_ACCESS_KEY, AWS_SECRET_ACCESS_KEY, ...); wins over the environment.")
@click.option("--retries", type=click.IntRange(0, None), default=3, show_default=True,
              help="Retries per file on retryable errors, each continuing from what was received.")
@click.option("--node", type=click.IntRange(0, None), default=None, metavar="N",
              help="A run of several nodes (RUN/node-N/): fetch node N's copy of the set (default: the lowest "
                   "node's); --latest is the newest set complete on every node.")
def download(url: str, out_dir: str, latest: bool, set_name: Optional[str], credentials: Optional[str],
             retries: int, node: Optional[int]) -> None:
    """Download a checkpoint set, verified against its manifest, resumable after an interruption."""
    from ..calls.download import download as download_set
    from ..run.progress import human_bytes
    from ..uploaders.destinations import parse_destination

    if latest and set_name is not None:
        raise click.UsageError("--latest and --set NAME exclude each other")
    _warnings_to_stderr()
    report = download_set(parse_destination(url, setting="URL"), out_dir, set_name=set_name,
                          credentials=credentials, retries=retries, node=node)
    for line in report.passed_over:
        click.echo(f"trainvisor: passed over set {line}", err=True)
    resumed = f", {len(report.resumed)} continued from an earlier attempt" if report.resumed else ""
    click.echo(f"downloaded set {report.set} ({len(report.files)} file(s), {human_bytes(report.bytes)} received"
               f"{resumed}) from {report.source} into {report.out_dir}, verified", err=True)


def _warnings_to_stderr() -> None:
    """No run log here: what the download warns of (a retried read, an unreadable manifest
    passed over) is said on stderr, one line each, as the command's own messages are."""
    from ..run.logsetup import MaskingFormatter

    handler = logging.StreamHandler()
    handler.setFormatter(MaskingFormatter("trainvisor: %(message)s"))  # a store's error may quote its URL
    handler.setLevel(logging.WARNING)
    logger = logging.getLogger("trainvisor")
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
