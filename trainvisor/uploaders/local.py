"""`file:///path`: the embedded default store, with the same guarantees as a remote one.

Each object is written to a temporary name in the destination directory, fsynced, renamed into
place and the directory fsynced: a reader never sees a partial object, a crash leaves none.
"""
from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path
from typing import Iterator, Optional

from .base import Progress, ReadError, StoredObject, UploadedObject, UploadError

__all__ = ["LocalUploader", "file_sha256"]

_CHUNK = 1 << 20
UNREACHABLE = frozenset({errno.EIO, errno.ESTALE, errno.ETIMEDOUT, errno.ENOTCONN, errno.EHOSTDOWN,
                         errno.EHOSTUNREACH, errno.ENETDOWN, errno.ENETUNREACH, errno.ECONNREFUSED,
                         errno.ECONNRESET})
"""What a network filesystem (NFS, a FUSE mount) answers while its server is away."""


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_sha256(path: Path) -> str:
    """The hex sha256 of a file's bytes: what a file:// object's checksum says."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class LocalUploader:
    """Copies files under a root directory; checksum is sha256 re-read from the stored copy.
    Reads them back too (StoreReader): a key is a path under the root."""

    def __init__(self, root: str, *, url: str = "") -> None:
        self.root = Path(root)
        self.url = url or f"file://{self.root}"

    def _target(self, key: str) -> Path:
        target = (self.root / key).resolve()
        if self.root.resolve() not in target.parents:
            raise UploadError(f"key {key!r} escapes the destination {self.root}", retryable=False)
        return target

    def preflight(self) -> None:
        """Write and remove a probe file. Retryable only when the filesystem says it cannot be
        reached now (a network mount gone away: `UNREACHABLE`); a path that is not a directory,
        a permission, a read-only or full disk is the configuration's to fix."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / f".trainvisor-probe-{os.getpid()}"
            probe.write_bytes(b"probe")
            probe.unlink()
        except OSError as exc:
            raise UploadError(f"cannot write to {self.url}: {exc.strerror}",
                              retryable=exc.errno in UNREACHABLE) from exc

    def stored(self, local_path: str, key: str) -> Optional[UploadedObject]:
        """The stored copy of `key` when it holds exactly the bytes of `local_path` (size, then
        sha256), else None: asked before sending a file an earlier attempt may have stored."""
        target = self._target(key)
        try:
            if not target.is_file() or target.stat().st_size != os.path.getsize(local_path):
                return None
            stored = file_sha256(target)
            if stored != file_sha256(Path(local_path)):
                return None
        except OSError as exc:
            raise UploadError(f"cannot compare {key} with {local_path}: {exc.strerror}", retryable=True) from exc
        return UploadedObject(key=key, size=target.stat().st_size, checksum=f"sha256:{stored}")

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        target = self._target(key)
        tmp = target.with_name(f".{target.name}.trainvisor-tmp")
        src_hash = hashlib.sha256()
        size = 0
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(local_path, "rb") as src, open(tmp, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    dst.write(chunk)
                    src_hash.update(chunk)
                    size += len(chunk)
                    if progress is not None:
                        progress(len(chunk))
                dst.flush()
                os.fsync(dst.fileno())
            stored = file_sha256(tmp)
            if stored != src_hash.hexdigest():
                tmp.unlink()
                raise UploadError(f"{key}: stored copy does not match the source", retryable=True)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except FileNotFoundError as exc:
            raise UploadError(f"{local_path}: no such file", retryable=False) from exc
        except OSError as exc:
            raise UploadError(f"{key}: cannot write to {self.url}: {exc.strerror}", retryable=True) from exc
        finally:
            if tmp.exists():  # cut short (a failure, or progress() cancelling at close): no debris
                tmp.unlink()
        return UploadedObject(key=key, size=size, checksum=f"sha256:{stored}")

    def delete_object(self, key: str) -> None:
        """Remove the object under `key` (retention); one already gone is what was wanted."""
        target = self._target(key)
        try:
            target.unlink()
        except FileNotFoundError:
            return
        except OSError as exc:
            raise UploadError(f"cannot delete {key} from {self.url}: {exc.strerror}", retryable=True) from exc
        _fsync_dir(target.parent)

    # -- reading (StoreReader) --------------------------------------------------------------

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        # A key is a relative path under the root: walk the deepest folder the prefix names.
        start = self.root / prefix.rpartition("/")[0]
        for folder, _dirs, names in os.walk(start):
            for name in names:
                path = Path(folder, name)
                key = path.relative_to(self.root).as_posix()
                if not key.startswith(prefix) or name.endswith(".trainvisor-tmp"):
                    continue  # an upload in flight is no object yet
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                yield StoredObject(key, st.st_size, st.st_mtime)

    def stat_object(self, key: str) -> Optional[StoredObject]:
        try:
            st = self._target(key).stat()
        except (FileNotFoundError, UploadError):
            return None
        except OSError as exc:
            raise ReadError(f"{key}: cannot read {self.url}: {exc.strerror}", retryable=True) from exc
        return StoredObject(key, st.st_size, st.st_mtime)

    def read_object(self, key: str, offset: int = 0) -> Iterator[bytes]:
        try:
            f = open(self._target(key), "rb")
        except (FileNotFoundError, UploadError):
            raise ReadError(f"{key}: no such object in {self.url}", retryable=False) from None
        except OSError as exc:
            raise ReadError(f"{key}: cannot read {self.url}: {exc.strerror}", retryable=True) from exc
        return _pieces(f, offset)


def _pieces(f, offset: int) -> Iterator[bytes]:
    with f:
        f.seek(offset)
        while chunk := f.read(_CHUNK):
            yield chunk
