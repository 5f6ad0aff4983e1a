"""`trainvisor run` options for uploading checkpoints, and the manager built from them."""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from typing import Callable, Optional
from urllib.parse import urlsplit

import click

from ..errors import ConfigError

__all__ = ["UploadOptions", "upload_options", "build_manager"]

log = logging.getLogger("trainvisor.upload")


@dataclass(frozen=True)
class UploadOptions:
    upload_to: Optional[str]
    drain_timeout: float
    delete_after_upload: bool
    concurrency: int


def upload_options(f: Callable) -> Callable:
    """Adds the upload options to a click command, passed on as one `upload_opts`."""

    @click.option("--upload-to", "upload_to", metavar="URL", default=None,
                  help="Upload every complete checkpoint (and a manifest per set, written last) to "
                       "file:///path, s3://bucket/prefix (S3-compatible stores: AWS_ENDPOINT_URL) or "
                       "kodo://bucket/prefix (QINIU_ACCESS_KEY, QINIU_SECRET_KEY, QINIU_UP_HOST or QINIU_REGION).")
    @click.option("--drain-timeout", type=float, default=600.0, show_default=True,
                  help="At exit, wait this long for pending uploads; what is left is listed.")
    @click.option("--delete-after-upload", is_flag=True,
                  help="Delete local checkpoint files once their upload is verified (never before).")
    @click.option("--upload-concurrency", type=click.IntRange(1, 64), default=2, show_default=True,
                  help="Checkpoint files uploaded at once.")
    @functools.wraps(f)
    def wrapper(*args, upload_to, drain_timeout, delete_after_upload, upload_concurrency, **kwargs):
        opts = UploadOptions(upload_to, drain_timeout, delete_after_upload, upload_concurrency)
        return f(*args, upload_opts=opts, **kwargs)

    return wrapper


def build_manager(opts: UploadOptions, *, run_dir: str, run_id: str):
    """The upload manager for `--upload-to`, preflighted (a bad destination fails here,
    before the training starts), or None without `--upload-to`."""
    if not opts.upload_to:
        return None
    from . import open_uploader
    from .manager import UploadManager

    url = opts.upload_to
    parts = urlsplit(url)
    if not parts.scheme:
        raise ConfigError(f"--upload-to needs a URL such as file:///backups or s3://bucket/prefix, got {url!r}")
    uploader = open_uploader(url, state_dir=run_dir)
    prefix = parts.path.strip("/") if parts.scheme != "file" else ""
    manager = UploadManager(uploader, run_dir=run_dir, run_id=run_id, prefix=prefix,
                            concurrency=opts.concurrency, delete_after_upload=opts.delete_after_upload)
    try:
        manager.preflight()
    except BaseException:
        manager.close()
        raise
    resumed = manager.resume()
    if resumed:
        log.info("resuming %d checkpoint set(s) left unfinished in %s", resumed, run_dir)
    return manager
