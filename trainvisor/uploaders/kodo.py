"""`kodo://bucket/prefix` through the `qiniu` SDK, with no global SDK state.

Hosts are passed per call (an explicit up host, or a region id), so the SDK never queries its
public region-lookup hosts when a host is configured. Every attempt signs a fresh upload token,
valid for longer than the upload can take. Large files go through resumable upload v2 with
4 MiB parts (the part size for which Kodo's returned hash is the file's qiniu etag), and the
SDK's progress record is kept in the run directory, one folder per file version, so a restarted
trainvisor resumes the parts already sent. A record the server no longer knows (the upload
expired or was lost) is deleted and the upload restarted. The returned hash is compared with the
file's qiniu etag, computed while the upload runs.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Optional
from urllib.parse import quote

import qiniu
from qiniu.http.endpoint import Endpoint
from qiniu.http.region import Region, ServiceName
from qiniu.services.storage.uploaders import FormUploader, ResumeUploaderV2

from .background import Background
from .base import Progress, ReadError, StoredObject, UploadedObject, UploadError
from .pool import DaemonThreadPool
from .records import ResumeRecords

__all__ = ["KodoUploader", "KodoHosts", "qiniu_etag"]

PART_SIZE = 4 << 20
"""Kodo's hash of a v2 upload equals the qiniu etag only with 4 MiB parts."""

_PIECE = 256 << 10  # a download's read size: what a connection cut mid-piece costs again
_MIN_TOKEN_TTL = 3600
_SLOWEST_RATE = 256 << 10  # bytes/s: the token outlives an upload this slow
_RESTART = {612, 701}  # the server does not know the recorded upload (v2: 612, v1: 701)
_PERMANENT = {
    401: "bad credentials (QINIU_ACCESS_KEY / QINIU_SECRET_KEY)",
    403: "permission denied",
    404: "not found",
    614: "the object exists and may not be overwritten",
    631: "no such bucket",
}


def qiniu_etag(path: str) -> str:
    """The qiniu etag of a file: sha1 per 4 MiB block, combined (same result as `qiniu.etag`)."""
    digests = []
    with open(path, "rb") as f:
        while block := f.read(PART_SIZE):
            digests.append(hashlib.sha1(block).digest())
    if len(digests) <= 1:
        raw = b"\x16" + (digests[0] if digests else hashlib.sha1(b"").digest())
    else:
        raw = b"\x96" + hashlib.sha1(b"".join(digests)).digest()
    return qiniu.urlsafe_base64_encode(raw)


@dataclass(frozen=True)
class KodoHosts:
    """Where the bucket lives: explicit hosts (URLs with scheme), or a region id such as `z0`.
    Reading back (`trainvisor download`) also needs `rsf_host` (listing; a region id implies it)
    and `download_host`, the bucket's download domain (no region implies one)."""

    up_host: Optional[str] = None
    rs_host: Optional[str] = None
    region_id: Optional[str] = None
    rsf_host: Optional[str] = None
    download_host: Optional[str] = None

    def region(self) -> Region:
        if self.up_host:
            services = {ServiceName.UP: [Endpoint.from_host(self.up_host)]}
            if self.rs_host:
                services[ServiceName.RS] = [Endpoint.from_host(self.rs_host)]
            if self.rsf_host:
                services[ServiceName.RSF] = [Endpoint.from_host(self.rsf_host)]
            return Region(region_id=self.region_id, services=services)
        if self.region_id:
            return Region.from_region_id(self.region_id, preferred_scheme="https")
        raise UploadError("kodo:// needs an up host or a region (up_host=/region= in the URL, "
                          "or QINIU_UP_HOST / QINIU_REGION)", retryable=False)

    @property
    def scheme(self) -> str:
        return self.up_host.split("://", 1)[0] if self.up_host and "://" in self.up_host else "https"


class _VersionRecorder:
    """The SDK's progress-record interface over ResumeRecords, in a folder named after the file
    version so a changed file never resumes another version's parts."""

    _KEY = "record"  # one file version per folder: one record

    def __init__(self, folder: str) -> None:
        self._records = ResumeRecords(folder)
        self._lock = threading.Lock()
        self._parts = (None, -1)  # (upload_id, parts) of the newest snapshot written

    def has_upload_record(self, file_name: str, key: str) -> bool:
        return self._records.get(self._KEY) is not None

    def get_upload_record(self, file_name: str, key: str) -> Optional[dict]:
        return self._records.get(self._KEY)

    def set_upload_record(self, file_name: str, key: str, data: dict) -> None:
        # Each SDK worker writes a snapshot of the parts done; one taken earlier but written
        # later must not replace a newer one, or a restart would resend parts already stored.
        newest = (data.get("upload_id"), len(data.get("etags") or ()))
        with self._lock:
            if newest[0] == self._parts[0] and newest[1] < self._parts[1]:
                return
            self._parts = newest
            self._records.put(self._KEY, data)

    def delete_upload_record(self, file_name: str, key: str) -> None:
        self._records.forget(self._KEY)


class KodoUploader:
    """One bucket. Files up to `form_limit` bytes go by form upload, larger ones resumable v2."""

    def __init__(self, bucket: str, *, url: str, access_key: str, secret_key: str, hosts: KodoHosts,
                 state_dir: Optional[str] = None, concurrency: int = 4, form_limit: int = PART_SIZE) -> None:
        self.url, self.bucket = url, bucket
        self._auth = qiniu.Auth(access_key, secret_key)
        self.hosts = self._hosts = hosts
        self._regions = [hosts.region()]
        self._state_dir = os.path.join(state_dir, "kodo-progress") if state_dir else None
        self._concurrency = concurrency
        self._form_limit = form_limit

    def _token(self, key: str, size: int) -> str:
        """Scoped to this key (so a changed file may overwrite its old version), valid for
        longer than an upload at a pessimistic rate could take."""
        ttl = max(_MIN_TOKEN_TTL, 2 * size // _SLOWEST_RATE)
        return self._auth.upload_token(self.bucket, key, ttl)

    def _error(self, what: str, info) -> UploadError:
        status = getattr(info, "status_code", -1)
        if status in _PERMANENT:
            return UploadError(f"{what} on {self.url}: {_PERMANENT[status]} (HTTP {status})", retryable=False)
        if status == -1 or status is None:
            exc = getattr(info, "exception", None)
            reason = type(exc).__name__ if exc is not None else "no reply"
            return UploadError(f"{what} on {self.url}: connection failed ({reason})", retryable=True)
        detail = getattr(info, "error", None) or ""
        return UploadError(f"{what} on {self.url}: HTTP {status} {detail}".rstrip(), retryable=True)

    def preflight(self) -> None:
        """Put and delete a probe object: proves credentials, bucket and write permission. Under
        the configured prefix (a key scoped to it, how platforms hand out buckets, may write
        nowhere else), named anew each time so two runs sharing a prefix never delete each
        other's."""
        from .destinations import parse_destination

        key = "/".join(filter(None, [parse_destination(self.url).prefix, f".trainvisor-probe-{os.urandom(6).hex()}"]))
        data = b"trainvisor preflight probe"
        try:
            uploader = FormUploader(self.bucket, regions=self._regions, preferred_scheme=self._hosts.scheme)
            ret, info = uploader.upload(key, data=data, up_token=self._token(key, len(data)))
        except Exception as exc:  # the SDK raises for malformed hosts and the like
            raise UploadError(f"cannot write a probe object to {self.url}: {type(exc).__name__}",
                              retryable=False) from exc
        if ret is None:  # retryable as for an upload: no connection or a 5xx, not 401/403/631
            raise self._error("cannot write a probe object", info)
        if self._hosts.rs_host or not self._hosts.up_host:
            manager = qiniu.BucketManager(self._auth, regions=self._regions, preferred_scheme=self._hosts.scheme)
            _, info = manager.delete(self.bucket, key)
            if info.status_code != 200:
                raise self._error("cannot delete the probe object", info)

    def upload(self, local_path: str, key: str, *, progress: Optional[Progress] = None) -> UploadedObject:
        try:
            st = os.stat(local_path)
        except FileNotFoundError:
            raise UploadError(f"{local_path}: no such file", retryable=False) from None
        want = Background(lambda: qiniu_etag(local_path))
        try:
            if st.st_size <= self._form_limit:
                ret, info = self._form(local_path, key, st.st_size)
            else:
                ret, info = self._resumable(local_path, key, st, progress)
        except OSError as exc:
            want.result()
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        except Exception as exc:  # the SDK raises on some failures instead of returning them
            want.result()
            raise UploadError(f"upload of {key} to {self.url} failed: {type(exc).__name__}", retryable=True) from exc
        try:
            expected = want.result()
        except OSError as exc:
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        if ret is None:
            raise self._error(f"upload of {key}", info)
        got = ret.get("hash")
        if got != expected:
            raise UploadError(f"{key}: stored hash {got} does not match the file's etag {expected}", retryable=True)
        if progress is not None and st.st_size <= self._form_limit:
            progress(st.st_size)
        return UploadedObject(key=key, size=st.st_size, checksum=f"qetag:{got}")

    def stored(self, local_path: str, key: str) -> Optional[UploadedObject]:
        """The object under `key` when it already holds exactly the bytes of `local_path` (stat:
        same size and qiniu etag), else None; also None without an rs host to ask. Called for a
        key an interrupted attempt may have finished (a kill after the store completed it)."""
        if self._hosts.up_host and not self._hosts.rs_host:
            return None
        try:
            st = os.stat(local_path)
            manager = qiniu.BucketManager(self._auth, regions=self._regions, preferred_scheme=self._hosts.scheme)
            ret, info = manager.stat(self.bucket, key)
            if ret is None:
                if getattr(info, "status_code", None) == 612:  # no such object
                    return None
                raise self._error(f"stat of {key}", info)
            etag = qiniu_etag(local_path) if ret.get("fsize") == st.st_size else None
        except OSError as exc:
            raise UploadError(f"cannot read {local_path}: {exc.strerror}", retryable=False) from exc
        if etag is None or ret.get("hash") != etag:
            return None
        folder = self._record_folder(key, st)
        if folder:  # the progress record of this version is of no further use
            shutil.rmtree(folder, ignore_errors=True)
        return UploadedObject(key=key, size=st.st_size, checksum=f"qetag:{etag}")

    def _form(self, path: str, key: str, size: int):
        uploader = FormUploader(self.bucket, regions=self._regions, preferred_scheme=self._hosts.scheme)
        return uploader.upload(key, file_path=path, up_token=self._token(key, size))

    def _resumable(self, path: str, key: str, st: os.stat_result, progress: Optional[Progress]):
        folder = self._record_folder(key, st)
        sent = [0]

        def on_progress(uploaded: int, total: int) -> None:
            if progress is not None and uploaded > sent[0]:
                progress(uploaded - sent[0])
            sent[0] = max(sent[0], uploaded)

        for restart in (False, True):
            recorder = _VersionRecorder(folder) if folder else None
            with DaemonThreadPool(self._concurrency, thread_name_prefix="trainvisor-kodo") as pool:
                uploader = ResumeUploaderV2(
                    self.bucket, regions=self._regions, preferred_scheme=self._hosts.scheme,
                    part_size=PART_SIZE, upload_progress_recorder=recorder, concurrent_executor=pool,
                    progress_handler=on_progress)
                # An open stream, not file_path: with file_path the SDK's own retry loop
                # crashes (AttributeError) on the first failed attempt.
                with open(path, "rb") as data:
                    ret, info = uploader.upload(key, data=data, data_size=st.st_size,
                                                file_name=os.path.basename(path), modify_time=int(st.st_mtime),
                                                up_token=self._token(key, st.st_size))
            if ret is not None:
                if folder:
                    shutil.rmtree(folder, ignore_errors=True)
                return ret, info
            if info is None or info.status_code not in _RESTART or restart:
                return ret, info
            # The recorded upload is gone on the server: start this file over.
            if folder:
                shutil.rmtree(folder, ignore_errors=True)
            sent[0] = 0
        return ret, info

    # -- reading (StoreReader) --------------------------------------------------------------

    def _manager(self) -> "qiniu.BucketManager":
        return qiniu.BucketManager(self._auth, regions=self._regions, preferred_scheme=self._hosts.scheme)

    def delete_object(self, key: str) -> None:
        """Delete `key` (retention) through the rs host; one already gone (612) is what was wanted."""
        if self._hosts.up_host and not self._hosts.rs_host:
            raise UploadError(f"deleting from {self.url} needs its rs host (QINIU_RS_HOST)", retryable=False)
        _, info = self._manager().delete(self.bucket, key)
        if getattr(info, "status_code", None) not in (200, 612):
            raise self._error(f"delete of {key}", info)

    def list_objects(self, prefix: str) -> Iterator[StoredObject]:
        if self._hosts.up_host and not self._hosts.rsf_host:
            raise ReadError(f"listing {self.url} needs its rsf host (QINIU_RSF_HOST)",
                            retryable=False)
        marker = None
        while True:
            ret, _eof, info = self._manager().list(self.bucket, prefix=prefix, marker=marker, limit=1000)
            if ret is None:
                err = self._error(f"listing {prefix or '/'}", info)
                raise ReadError(str(err), retryable=err.retryable)
            for item in ret.get("items") or ():
                yield StoredObject(item["key"], int(item["fsize"]), int(item["putTime"]) / 1e7)
            marker = ret.get("marker")
            if not marker:
                return

    def stat_object(self, key: str) -> Optional[StoredObject]:
        if self._hosts.up_host and not self._hosts.rs_host:
            raise ReadError(f"stat on {self.url} needs its rs host (QINIU_RS_HOST)", retryable=False)
        ret, info = self._manager().stat(self.bucket, key)
        if ret is None:
            if getattr(info, "status_code", None) == 612:  # no such object
                return None
            err = self._error(f"stat of {key}", info)
            raise ReadError(str(err), retryable=err.retryable)
        return StoredObject(key, int(ret["fsize"]), int(ret["putTime"]) / 1e7)

    def object_hash(self, key: str) -> Optional[str]:
        """The object's qiniu etag as Kodo's stat reports it (None when it reports none)."""
        ret, info = self._manager().stat(self.bucket, key)
        if ret is None:
            err = self._error(f"stat of {key}", info)
            raise ReadError(str(err), retryable=err.retryable)
        return ret.get("hash") or None

    def read_object(self, key: str, offset: int = 0) -> Iterator[bytes]:
        """GET of a private download URL (signed, valid an hour) on the bucket's download domain,
        ranged from `offset`. The signed URL is never shown: messages name the key."""
        import requests  # the qiniu SDK's own HTTP library

        if not self._hosts.download_host:
            raise ReadError(f"reading {self.url} needs its download domain (QINIU_DOWNLOAD_HOST)",
                            retryable=False)
        url = self._auth.private_download_url(f"{self._hosts.download_host.rstrip('/')}/{quote(key)}", 3600)
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            reply = requests.get(url, headers=headers, stream=True, timeout=60)
        except requests.RequestException as exc:
            raise ReadError(f"GET of {key} on {self.url}: connection failed ({type(exc).__name__})",
                            retryable=True) from exc
        if reply.status_code != (206 if offset else 200):
            reply.close()
            if reply.status_code == 404:
                raise ReadError(f"{key}: no such object in {self.url}", retryable=False)
            raise ReadError(f"GET of {key} on {self.url}: HTTP {reply.status_code}"
                            + (" (the range was not honoured)" if reply.status_code == 200 else ""),
                            retryable=reply.status_code >= 500)
        return _reply_pieces(key, self.url, reply)

    def _record_folder(self, key: str, st: os.stat_result) -> Optional[str]:
        if not self._state_dir:
            return None
        version = f"{self.url}\0{key}\0{st.st_size}\0{st.st_mtime_ns}".encode()
        return os.path.join(self._state_dir, hashlib.sha1(version).hexdigest()[:20])


def _reply_pieces(key: str, url: str, reply) -> Iterator[bytes]:
    import requests

    try:
        yield from reply.iter_content(_PIECE)
    except requests.RequestException as exc:  # a connection cut mid-body
        raise ReadError(f"GET of {key} on {url}: {type(exc).__name__}", retryable=True) from exc
    finally:
        reply.close()


def open_kodo(url: str, *, state_dir: Optional[str], env: "os._Environ[str] | dict[str, str]",
              check_hosts: Callable[[KodoHosts], None] = lambda hosts: None) -> KodoUploader:
    """`kodo://bucket/prefix[?up_host=URL&rs_host=URL&region=ID]`; hosts default to
    QINIU_UP_HOST / QINIU_RS_HOST / QINIU_REGION (reading back also QINIU_RSF_HOST and
    QINIU_DOWNLOAD_HOST, the bucket's download domain), credentials come from QINIU_ACCESS_KEY and
    QINIU_SECRET_KEY only (never from the URL, which ends up in logs). `check_hosts` may refuse
    the hosts (offline mode) before any SDK object is built from them."""
    from ..errors import ConfigError
    from .destinations import parse_destination

    dest = parse_destination(url)
    query = dest.options
    hosts = KodoHosts(up_host=query.get("up_host") or env.get("QINIU_UP_HOST") or None,
                      rs_host=query.get("rs_host") or env.get("QINIU_RS_HOST") or None,
                      region_id=query.get("region") or env.get("QINIU_REGION") or None,
                      rsf_host=env.get("QINIU_RSF_HOST") or None,
                      download_host=env.get("QINIU_DOWNLOAD_HOST") or None)
    for name, host in (("up_host", hosts.up_host), ("rs_host", hosts.rs_host), ("rsf_host", hosts.rsf_host),
                       ("download_host", hosts.download_host)):
        if host and not host.startswith(("http://", "https://")):
            raise ConfigError(f"Kodo {name} must be a URL with http:// or https://, got {host!r}")
    if not hosts.up_host and not hosts.region_id:
        raise ConfigError(f"{url}: set QINIU_UP_HOST (or QINIU_REGION, e.g. z0) so trainvisor never has to "
                          "look the bucket's region up")
    check_hosts(hosts)
    access_key, secret_key = env.get("QINIU_ACCESS_KEY"), env.get("QINIU_SECRET_KEY")
    if not access_key or not secret_key:
        raise ConfigError(f"{url}: QINIU_ACCESS_KEY and QINIU_SECRET_KEY must be set")
    return KodoUploader(dest.location, url=f"kodo://{dest.location}{dest.path}", access_key=access_key,
                        secret_key=secret_key, hosts=hosts, state_dir=state_dir)
