"""`Fetcher().fetch(url)` -> `(content, err)` and `fetch_huge_file(url, path)` -> `err`: a file
from `http(s)://` or from Kodo by the SDK's `qiniu://[uid@]zone/bucket/key` URLs.

Underneath, the download path of `trainvisor download`: a Kodo object is read through the Kodo
reader (a signed URL on QINIU_DOWNLOAD_HOST, keys from QINIU_ACCESS_KEY/QINIU_SECRET_KEY) and
checked against its stat (size and qiniu etag); an HTTP file is checked against its
Content-Length. A cut connection is retried from the bytes received (a ranged read); the file
is written to `PATH.part` and moved into place only once verified (the file the original wrote
as it received it could be left half written).
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional, Union
from urllib.parse import unquote, urlsplit

__all__ = ["Fetcher", "FetchError"]

from ....uploaders.base import ReadError as FetchError  # what `err` is: one line, retryable or not


class Fetcher:
    """Downloads with `retries` retries of a retryable failure, resumed from the bytes received."""

    def __init__(self, retries: int = 3, *, env: Optional[Mapping[str, str]] = None, timeout: float = 60.0,
                 sleep: Callable[[float], object] = time.sleep) -> None:
        self.retries, self.timeout, self._sleep = max(0, retries), timeout, sleep
        self._env = dict(os.environ if env is None else env)

    def fetch(self, url: str):
        """The content as bytes: `(content, None)`, or `(None, err)`."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="ava-fetch-") as tmp:
            target = Path(tmp) / "content"
            err = self.fetch_huge_file(url, str(target))
            return (None, err) if err is not None else (target.read_bytes(), None)

    def fetch_huge_file(self, url: str, local_path: Union[str, "os.PathLike[str]"]) -> Optional[Exception]:
        """Write the file at `url` to `local_path`; the error, or None."""
        target = Path(local_path)
        part = target.with_name(target.name + ".part")
        try:
            part.unlink(missing_ok=True)  # resumed within this call only: an old part may be another object's
            source = self._source(url)
            for attempt in range(self.retries + 1):
                try:
                    with open(part, "ab") as out:
                        for piece in source.read(out.tell()):
                            out.write(piece)
                    break
                except FetchError as exc:
                    if not exc.retryable or attempt == self.retries:
                        raise
                    self._sleep(min(30.0, 0.5 * 2 ** attempt))
            source.verify(part)
            os.replace(part, target)
            return None
        except (FetchError, OSError) as exc:
            return exc if isinstance(exc, FetchError) else FetchError(f"{url}: {exc}", retryable=False)
        except Exception as exc:  # a malformed URL and the like: returned, as AVA's (res, err)
            return FetchError(f"{url}: {type(exc).__name__}: {exc}", retryable=False)

    def _source(self, url: str):
        scheme = urlsplit(url).scheme
        if scheme in ("http", "https"):
            return _HttpSource(url, self.timeout)
        if scheme == "qiniu":
            return _KodoSource(url, self._env)
        raise FetchError(f"cannot fetch {url!r}: only http://, https:// and qiniu://zone/bucket/key", retryable=False)


class _HttpSource:
    def __init__(self, url: str, timeout: float) -> None:
        self.url, self.timeout, self.size = url, timeout, None

    def read(self, offset: int) -> Iterator[bytes]:
        import urllib.error
        import urllib.request

        request = urllib.request.Request(self.url, headers={"Range": f"bytes={offset}-"} if offset else {})
        try:
            reply = urllib.request.urlopen(request, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            raise FetchError(f"GET {self.url}: HTTP {exc.code}", retryable=exc.code >= 500) from None
        except (urllib.error.URLError, OSError) as exc:
            raise FetchError(f"GET {self.url}: {exc}", retryable=True) from None
        with reply:
            if offset and reply.status != 206:
                raise FetchError(f"GET {self.url}: the range was not honoured", retryable=False)
            length = reply.headers.get("Content-Length")
            if length is not None and self.size is None:
                self.size = offset + int(length)
            try:
                while True:
                    piece = reply.read(256 << 10)
                    if not piece:
                        return
                    yield piece
            except OSError as exc:
                raise FetchError(f"GET {self.url}: {type(exc).__name__}", retryable=True) from None

    def verify(self, part: Path) -> None:
        if self.size is not None and part.stat().st_size != self.size:
            part.unlink()
            raise FetchError(f"{self.url}: received {part.stat().st_size if part.exists() else 0} bytes "
                             f"of {self.size}", retryable=False)


class _KodoSource:
    def __init__(self, url: str, env: Mapping[str, str]) -> None:
        from ....uploaders import open_uploader

        parts = urlsplit(url)
        zone = parts.netloc.rpartition("@")[2]
        bucket, _, key = parts.path.lstrip("/").partition("/")
        if not zone or not bucket or not key:
            raise FetchError(f"a qiniu URL is qiniu://zone/bucket/key, got {url!r}", retryable=False)
        self.url, self.key = url, unquote(key)
        if not (env.get("QINIU_UP_HOST") or env.get("QINIU_REGION")):
            env = {**env, "QINIU_REGION": zone}
        self.reader = open_uploader(f"kodo://{bucket}", env=env)
        self.stat = self.reader.stat_object(self.key)
        if self.stat is None:
            raise FetchError(f"{url}: no such object", retryable=False)

    def read(self, offset: int) -> Iterator[bytes]:
        return self.reader.read_object(self.key, offset)

    def verify(self, part: Path) -> None:
        """Size, then the object's qiniu etag (the hash Kodo's stat reports)."""
        from ....uploaders.kodo import qiniu_etag

        size = part.stat().st_size
        if size != self.stat.size:
            part.unlink()
            raise FetchError(f"{self.url}: received {size} bytes of {self.stat.size}", retryable=False)
        expected = self.reader.object_hash(self.key) if hasattr(self.reader, "object_hash") else None
        if expected and qiniu_etag(str(part)) != expected:
            part.unlink()
            raise FetchError(f"{self.url}: the bytes received differ from the stored object (qiniu etag)",
                             retryable=False)
