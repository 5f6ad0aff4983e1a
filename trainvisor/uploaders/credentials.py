"""Credentials and hosts of a destination from a file, for platforms that mount secrets as files.

The environment stays the first source (`QINIU_ACCESS_KEY`, `AWS_SECRET_ACCESS_KEY`, ...);
`upload.credentials` (`--credentials FILE`) names a file of ``KEY=value`` lines with the same
names, the form of Docker's ``--env-file`` and of a Kubernetes secret rendered as an env file.
Where both give a key, the file wins: it was named for this run, while the environment may be
left over from another (boto3 likewise skips the environment when a profile is named). The config holds only the file's path, so a config that is shown, saved
in the run directory or logged never carries a secret; errors name the file, the line and
the key, never a value.
"""
from __future__ import annotations

import os
from collections import ChainMap
from dataclasses import dataclass, field
from typing import Mapping, Optional

from ..errors import ConfigError
from ..secrets import remember_from

__all__ = ["CREDENTIAL_KEYS", "S3Credentials", "read_credentials_file", "destination_environment"]

CREDENTIAL_KEYS = frozenset({
    "QINIU_ACCESS_KEY", "QINIU_SECRET_KEY", "QINIU_UP_HOST", "QINIU_RS_HOST", "QINIU_REGION",
    "QINIU_RSF_HOST", "QINIU_DOWNLOAD_HOST",  # what `trainvisor download` reads a bucket back through
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL",
    "AWS_DEFAULT_REGION", "AWS_REGION",
    "TRAINVISOR_WEBHOOK_TOKEN",  # the webhook sink's bearer token (sinks/webhook.py): one file serves both
})


def read_credentials_file(path: str | os.PathLike, *, keys: frozenset = CREDENTIAL_KEYS,
                          setting: str = "upload.credentials") -> dict[str, str]:
    """The ``KEY=value`` lines of `path` (blank lines, ``#`` comments and a leading ``export``
    allowed; a value may be quoted). Only the names in `keys` are accepted, so a
    typo is an error at start, not an upload that fails an hour later for want of a key.
    `setting`: the option that named the file, for the error that cannot read it."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"{setting}: cannot read {path}: {reason}") from None
    values: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        where = f"{path}:{number}"
        if not sep:
            raise ConfigError(f"{where}: expected KEY=value")  # the line may be a secret: not shown
        if key not in keys:
            raise ConfigError(f"{where}: unknown key {key[:40]!r} (known: {', '.join(sorted(keys))})")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if not value:
            raise ConfigError(f"{where}: {key} is empty")
        values[key] = value
    remember_from(values)  # a store that quotes one back (a signature error) is masked anywhere it is shown
    return values


def destination_environment(credentials_file: Optional[str],
                            environ: Optional[Mapping[str, str]] = None) -> Mapping[str, str]:
    """What the uploaders read their credentials and hosts from: the file's keys over the environment."""
    environ = os.environ if environ is None else environ
    if not credentials_file:
        return environ
    return ChainMap(read_credentials_file(credentials_file), dict(environ))


@dataclass(frozen=True)
class S3Credentials:
    """What boto3's session is given; None leaves a value to boto3's own chain (the environment,
    ~/.aws, instance metadata). The secrets stay out of repr, so a logged object shows none."""

    access_key_id: Optional[str] = None
    secret_access_key: Optional[str] = field(default=None, repr=False)
    session_token: Optional[str] = field(default=None, repr=False)
    region: Optional[str] = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "S3Credentials":
        return cls(env.get("AWS_ACCESS_KEY_ID") or None, env.get("AWS_SECRET_ACCESS_KEY") or None,
                   env.get("AWS_SESSION_TOKEN") or None, env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or None)
