"""Destination URLs: what `file:///backups`, `s3://bucket/prefix` and `kodo://bucket/prefix?...`
say, the keys objects get under them, and how a URL is shown in a message.

The one place that reads them: a run's `upload.to`, `trainvisor upload --to`, the
`trainvisor.upload(to=...)` call and the built-in uploaders' factories all parse here, so a URL
means the same everywhere and is refused with the same one-line error. A URL is refused before
any SDK is imported or any host is contacted. Pure: urllib only, cheap to import (the
configuration masks URLs with it in every run).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping
from urllib.parse import parse_qs, urlsplit

from ..errors import ConfigError
from ..secrets import MASK, mask_url  # re-exported: what a URL's owner shows of it

__all__ = ["Destination", "parse_destination", "key_prefix", "mask_url", "RUN_KEYS", "NODE_RUN_KEYS", "run_keys", "FILE_KEYS", "MASK",
           "KODO_OPTIONS"]

RUN_KEYS = "{prefix}/{run_id}/{relpath}"
"""A run's objects: its checkpoints' files and manifests under the run id, so runs never collide."""
NODE_RUN_KEYS = "{prefix}/{run_id}/%s/{relpath}"
"""A run's objects from one node of several: `%s` is the node's folder (`node-<n>`), so nodes that
write sets of the same names keep them apart (`sets.newest_on_every_node` reads them back)."""
FILE_KEYS = "{prefix}/{relpath}"
"""`trainvisor upload`'s objects: each file under its own relative path, nothing added."""

KODO_OPTIONS = ("up_host", "rs_host", "region")
"""What a `kodo://` URL's query may set (hosts are otherwise read from QINIU_* variables)."""

_EXAMPLE = "file:///backups or s3://bucket/prefix"


@dataclass(frozen=True)
class Destination:
    """A destination URL, read. `location` is its host part, the bucket (s3, kodo; empty or
    `localhost` for file), `path` its path (file: the store's directory), `options` its query
    (kodo's hosts)."""

    url: str
    scheme: str
    location: str
    path: str
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def prefix(self) -> str:
        """What object keys start with: the path without its slashes; nothing for a file://
        store, whose path is where the store is, not part of a key."""
        return "" if self.scheme == "file" else self.path.strip("/")

    @property
    def shown(self) -> str:
        """The URL as a message may show it: a password masked."""
        return mask_url(self.url)


def run_keys(node_folder: str = "") -> str:
    """The key template of a run's objects: `RUN_KEYS`, with the node's folder below the run's
    when there is one (a single-node run keeps the layout it always had)."""
    if not node_folder:
        return RUN_KEYS
    if "/" in node_folder or "{" in node_folder or "}" in node_folder:
        raise ValueError(f"not a node folder: {node_folder!r}")
    return NODE_RUN_KEYS % node_folder


def key_prefix(url: str) -> str:
    """The key prefix of a URL that was opened already (an uploader's `url`, which may be
    anything a registered factory accepted): never an error, "" when there is no path."""
    parts = urlsplit(url)
    return "" if parts.scheme == "file" else parts.path.strip("/")


def parse_destination(url: str, *, setting: str = "upload.to") -> Destination:
    """Read `url`; a one-line ConfigError when it is no URL (naming `setting`, where the caller
    took it from: `upload.to`, `--to`) or a built-in scheme's URL of the wrong form. A scheme
    nobody registered is left to `open_uploader`, which lists the known ones."""
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # `s3://[bucket`: urllib refuses it
        raise ConfigError(f"{setting}: {exc}, in {mask_url(url)!r}") from None
    if not parts.scheme:
        raise ConfigError(f"{setting} needs a URL such as {_EXAMPLE}, got {mask_url(url)!r}")
    options = MappingProxyType({k: v[-1] for k, v in parse_qs(parts.query).items()})
    dest = Destination(url=url, scheme=parts.scheme, location=parts.netloc, path=parts.path, options=options)
    check = _FORMS.get(parts.scheme)
    if check is not None:
        check(dest)
    return dest


def _check_file(dest: Destination) -> None:
    if dest.location not in ("", "localhost") or not dest.path:
        raise ConfigError(f"file URL must look like file:///absolute/path, got {dest.shown!r}")


def _bucket_check(name: str, example: str) -> Callable[[Destination], None]:
    def check(dest: Destination) -> None:
        if not dest.location:
            raise ConfigError(f"{name} URL must look like {example}, got {dest.shown!r}")
        # Credentials in a URL end up in logs: they come from the environment. A password with a
        # `/` in it (AWS secret keys have them) ends the host part early: the masker finds it.
        if "@" in dest.location or dest.shown.partition("?")[0] != dest.url.partition("?")[0]:
            raise ConfigError(f"{name} URL takes no user or password (credentials come from the environment "
                              f"or a credentials file), got {dest.shown!r}")

    return check


def _check_kodo(dest: Destination) -> None:
    _bucket_check("Kodo", "kodo://bucket/prefix")(dest)
    unknown = set(dest.options) - set(KODO_OPTIONS)
    if unknown:
        raise ConfigError(f"unknown Kodo URL option(s) {', '.join(sorted(unknown))} in {dest.shown!r} "
                          f"(known: {', '.join(KODO_OPTIONS)})")


_FORMS = {"file": _check_file, "s3": _bucket_check("S3", "s3://bucket/prefix"), "kodo": _check_kodo}
