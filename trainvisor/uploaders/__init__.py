"""Destinations for checkpoints, chosen by URL scheme (`file://`, `s3://`, `kodo://` built in).

What a URL says is read in destinations.py; here each scheme opens its uploader. The names below
load on first use and uploader modules when their scheme is opened, so the configuration, which
masks URLs with `destinations` in every run, does not load them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Mapping, Optional
from urllib.parse import urlsplit

from .._lazy import lazy_exports
from ..errors import ConfigError
from .destinations import mask_url, parse_destination

if TYPE_CHECKING:
    from .base import Progress, ReadError, StoredObject, StoreReader, UploadedObject, Uploader, UploadError
    from .local import LocalUploader

_LAZY = {"Progress": "base", "UploadedObject": "base", "Uploader": "base", "UploadError": "base",
         "LocalUploader": "local", "StoreReader": "base", "StoredObject": "base", "ReadError": "base"}

__all__ = [
    "Progress",
    "UploadError",
    "UploadedObject",
    "Uploader",
    "StoreReader",
    "StoredObject",
    "ReadError",
    "LocalUploader",
    "register_uploader",
    "open_uploader",
]

Factory = Callable[[str, Optional[str], Mapping[str, str]], "Uploader"]
"""`factory(url, state_dir, env)`: state_dir (in the run directory) holds resumable-upload records;
env is where credentials and hosts are read (the environment, or a credentials file over it)."""

_FACTORIES: dict[str, Factory] = {}


def register_uploader(scheme: str, factory: Factory) -> None:
    """Make `scheme://...` URLs open with `factory(url, state_dir, env)`."""
    if not scheme.isidentifier() or not callable(factory):
        raise ValueError(f"register_uploader needs a scheme name and a callable, got {scheme!r}, {factory!r}")
    _FACTORIES[scheme] = factory


def open_uploader(url: str, *, state_dir: Optional[str] = None, credentials: Optional[str] = None,
                  env: Optional[Mapping[str, str]] = None) -> "Uploader":
    """The uploader for `url`; a one-line ConfigError for an unknown scheme or a bad credentials
    file. `credentials`: a file of KEY=value lines whose keys win over `env` (default: os.environ)."""
    from .credentials import destination_environment

    try:
        scheme = urlsplit(url).scheme
    except ValueError:  # not a URL (`s3://[x`): no factory takes it
        scheme = ""
    factory = _FACTORIES.get(scheme)
    if factory is None:
        known = ", ".join(f"{s}://" for s in sorted(_FACTORIES))
        raise ConfigError(f"unsupported upload destination {mask_url(url)!r} (known: {known})")
    return factory(url, state_dir, destination_environment(credentials, env))


__getattr__ = lazy_exports(__name__, globals(), _LAZY)


def _open_file(url: str, state_dir: Optional[str], env: Mapping[str, str]) -> Uploader:
    from .local import LocalUploader

    return LocalUploader(parse_destination(url).path, url=url)


register_uploader("file", _open_file)


def _open_s3(url: str, state_dir: Optional[str], env: Mapping[str, str]) -> Uploader:
    """`s3://bucket/prefix`; the endpoint of an S3-compatible store comes from AWS_ENDPOINT_URL."""
    from .credentials import S3Credentials
    from .s3 import S3Uploader  # boto3 is slow to import: only when asked for

    bucket = parse_destination(url).location
    endpoint = env.get("AWS_ENDPOINT_URL") or None
    _refuse_public_host_when_offline(endpoint, url)
    return S3Uploader(bucket, url=url, endpoint_url=endpoint, state_dir=state_dir,
                      credentials=S3Credentials.from_env(env))


def _refuse_public_host_when_offline(endpoint: "str | None", url: str, default: str = "the public AWS endpoint") -> None:
    """With TRAINVISOR_OFFLINE=1 (tests, demo) only a loopback endpoint is allowed."""
    import os

    if os.environ.get("TRAINVISOR_OFFLINE") != "1":
        return
    host = urlsplit(endpoint).hostname if endpoint else None
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ConfigError(f"TRAINVISOR_OFFLINE=1 but {url} would reach {host or default}")


register_uploader("s3", _open_s3)


def _open_kodo(url: str, state_dir: Optional[str], env: Mapping[str, str]) -> Uploader:
    """`kodo://bucket/prefix`; see trainvisor.uploaders.kodo.open_kodo for hosts and credentials."""
    from .kodo import open_kodo  # the qiniu SDK is imported only when asked for

    def offline_check(hosts) -> None:
        # Before the SDK sees a region id: from one it derives (and would resolve) public hosts.
        _refuse_public_host_when_offline(hosts.up_host, url, "Qiniu's public hosts")
        for host in (hosts.rs_host, hosts.rsf_host, hosts.download_host):
            if host:
                _refuse_public_host_when_offline(host, url, "Qiniu's public hosts")

    return open_kodo(url, state_dir=state_dir, env=env, check_hosts=offline_check)


register_uploader("kodo", _open_kodo)
