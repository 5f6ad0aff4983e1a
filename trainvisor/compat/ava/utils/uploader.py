"""`Uploader(ak, sk, bucket).upload_file(local_file, key)`: one file to a Kodo bucket under
exactly `key`, through trainvisor's Kodo uploader.

Unlike the original: the upload token is signed for each attempt and lives at least an hour
(longer for a large file at a slow rate; the original's lasted 60 seconds, so a large upload
outlived it), large files go as resumable 4 MiB parts, the stored object is checked against the
file's qiniu etag, and a retryable failure (a connection cut, a 5xx) is retried with backoff.
Hosts come from QINIU_UP_HOST / QINIU_RS_HOST or QINIU_REGION (default z0, AVA's zone).
"""
from __future__ import annotations

import os
import random
import time
from typing import Callable, Mapping, Optional

__all__ = ["Uploader"]


class Uploader:
    """A Kodo bucket with the keys given (not read from the environment, as AVA's)."""

    def __init__(self, ak: str, sk: str, bucket: str, *, env: Optional[Mapping[str, str]] = None,
                 attempts: int = 5, sleep: Callable[[float], object] = time.sleep) -> None:
        from ....uploaders.destinations import parse_destination

        self.bucket = bucket
        base = dict(os.environ if env is None else env)
        if not (base.get("QINIU_UP_HOST") or base.get("QINIU_REGION")):
            base["QINIU_REGION"] = "z0"
        self._env = {**base, "QINIU_ACCESS_KEY": ak, "QINIU_SECRET_KEY": sk}
        parse_destination(f"kodo://{bucket}", setting="Uploader(bucket=...)")  # a bad name: one line, now
        self._attempts, self._sleep = max(1, attempts), sleep
        self._kodo = None

    def _uploader(self):
        if self._kodo is None:
            from ....uploaders import open_uploader

            self._kodo = open_uploader(f"kodo://{self.bucket}", env=self._env)
        return self._kodo

    def upload_file(self, local_file: str, key: str):
        """Upload and verify; the `UploadedObject` (key, size, checksum). Raises `UploadError`
        (one line: what failed, on which bucket) when it fails for good, as AVA raised."""
        from ....uploaders.base import UploadError
        from ....uploaders.outcomes import RetryPolicy

        policy, rng = RetryPolicy(), random.Random()
        for attempt in range(self._attempts):
            try:
                return self._uploader().upload(os.fspath(local_file), key)
            except UploadError as exc:
                if not exc.retryable or attempt + 1 == self._attempts:
                    raise
                self._sleep(policy.delay(attempt, rng))
        raise AssertionError("unreachable")  # pragma: no cover
