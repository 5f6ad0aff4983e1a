"""The contract every destination implements: preflight, then upload-and-verify one file; and
the reading side the built-in ones have too (`StoreReader`: list, stat, ranged read)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Optional, Protocol

from ..errors import TrainvisorError

__all__ = ["StoreError", "UploadError", "UploadedObject", "Uploader", "Progress", "StoredObject", "StoreReader", "ReadError"]

Progress = Callable[[int], None]
"""Called with the number of bytes sent since the last call."""


class StoreError(TrainvisorError):
    """A store failed. `retryable` says whether trying again can help (5xx, dropped connection)
    or not (bad credentials, missing bucket); the message never contains credentials."""

    exit_code = 3

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class UploadError(StoreError):
    """An upload failed."""


@dataclass(frozen=True)
class UploadedObject:
    """What the destination holds after a verified upload."""

    key: str
    size: int
    checksum: str


class Uploader(Protocol):
    """One destination. `upload` returns only once the stored object is verified, else raises.

    Optional: `stored(local_path, key) -> Optional[UploadedObject]`, the object when the store
    already holds exactly these bytes (S3, Kodo). The manager asks it for a key a killed attempt
    left `uploading`, so an upload the store completed just before the kill is not sent again.
    Optional: `delete_object(key)`, for retention (uploaders/retention.py): a key already gone
    is no error; UploadError when the store refuses."""

    url: str

    def preflight(self) -> None:
        """Check credentials, bucket and write permission; UploadError when they fail, its
        `retryable` as an upload's would be: True when the store cannot be reached or says
        "later" (a run then starts and tries again: startgate.py), False for what the
        configuration must fix (credentials, bucket, path)."""

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        """Upload one file under `key` and verify it."""


class ReadError(StoreError):
    """Reading a store failed (its message never contains a signed URL either)."""


@dataclass(frozen=True)
class StoredObject:
    """An object as a listing shows it; `modified`: when it was stored (seconds since the epoch)."""

    key: str
    size: int
    modified: float


class StoreReader(Protocol):
    """The reading side of a destination (`trainvisor download`); the built-in uploaders have it.
    Keys are full object keys (the URL's prefix included), as in a manifest."""

    url: str

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        """Every object whose key starts with `prefix` ("" for all), in no particular order."""

    def stat_object(self, key: str) -> Optional[StoredObject]:
        """The object under `key`, or None when there is none."""

    def read_object(self, key: str, offset: int = 0) -> Iterator[bytes]:
        """The object's bytes from `offset` on, in pieces; closing the iterator ends the read.
        ReadError(retryable=False) when there is no such object."""
