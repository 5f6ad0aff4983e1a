"""Destinations for checkpoints, chosen by URL scheme (`file://` built in)."""
from __future__ import annotations

from typing import Callable
from urllib.parse import urlsplit

from ..errors import ConfigError
from .base import Progress, UploadedObject, Uploader, UploadError
from .local import LocalUploader

__all__ = [
    "Progress",
    "UploadError",
    "UploadedObject",
    "Uploader",
    "LocalUploader",
    "register_uploader",
    "open_uploader",
]

_FACTORIES: dict[str, Callable[[str], Uploader]] = {}


def register_uploader(scheme: str, factory: Callable[[str], Uploader]) -> None:
    """Make `scheme://...` URLs open with `factory(url)`."""
    _FACTORIES[scheme] = factory


def open_uploader(url: str) -> Uploader:
    """The uploader for `url`; a one-line ConfigError for an unknown scheme."""
    scheme = urlsplit(url).scheme
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES))
        raise ConfigError(f"unsupported upload destination {url!r} (known: {known})")
    return factory(url)


def _open_file(url: str) -> Uploader:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path:
        raise ConfigError(f"file URL must look like file:///absolute/path, got {url!r}")
    return LocalUploader(parts.path, url=url)


register_uploader("file", _open_file)


def _open_s3(url: str) -> Uploader:
    """`s3://bucket/prefix`; the endpoint of an S3-compatible store comes from AWS_ENDPOINT_URL."""
    import os

    from .s3 import S3Uploader  # boto3 is slow to import: only when asked for

    parts = urlsplit(url)
    if not parts.netloc:
        raise ConfigError(f"S3 URL must look like s3://bucket/prefix, got {url!r}")
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or None
    _refuse_public_host_when_offline(endpoint, url)
    return S3Uploader(parts.netloc, url=url, endpoint_url=endpoint)


def _refuse_public_host_when_offline(endpoint: "str | None", url: str) -> None:
    """With TRAINVISOR_OFFLINE=1 (tests, demo) only a loopback endpoint is allowed."""
    import os

    if os.environ.get("TRAINVISOR_OFFLINE") != "1":
        return
    host = urlsplit(endpoint).hostname if endpoint else None
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError(f"TRAINVISOR_OFFLINE=1 but {url} would reach {host or 'the public AWS endpoint'}")


register_uploader("s3", _open_s3)
