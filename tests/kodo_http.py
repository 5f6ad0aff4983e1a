"""The Kodo-protocol test server's HTTP layer: requests routed to `KodoServer` (kodo_server.py,
the buckets, tokens and uploads), replies with the headers the `qiniu` SDK checks, faults
injected per request, and private downloads (ranged, or cut half way for a test)."""
from __future__ import annotations

import json
import re
import secrets
import socket
import time
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Optional
from urllib.parse import parse_qs, unquote

from .http_servers import TrackingServer
from .kodo_codec import KodoError, _unb64

if TYPE_CHECKING:
    from .kodo_server import KodoServer

__all__ = ["_Handler", "_Server"]


_Server = TrackingServer
_V2 = re.compile(r"^/buckets/(?P<bucket>[^/]+)/objects/(?P<key>[^/]+)/uploads(?:/(?P<id>[^/]+)(?:/(?P<n>\d+))?)?$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    kodo: KodoServer

    def log_message(self, fmt, *args) -> None:  # quiet: tests read `requests` instead
        pass

    def handle_one_request(self) -> None:
        if time.monotonic() < self.kodo._down_until:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            return
        super().handle_one_request()

    def _body(self, limit: Optional[int] = None) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                out += self.rfile.read(size)
                self.rfile.readline()
            data = bytes(out)
        else:
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n if limit is None else min(n, limit))
        with self.kodo._lock:
            self.kodo.bytes_received += len(data)
        return data

    def _reply(self, status: int, body: Optional[dict]) -> None:
        payload = json.dumps(body if body is not None else {}).encode()
        # Recorded before the reply goes out: a client that has its answer finds its request listed.
        with self.kodo._lock:
            self.kodo.requests.append((self.command, self.path, status))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("X-Reqid", secrets.token_hex(8))
        self.end_headers()
        self.wfile.write(payload)

    def _dispatch(self) -> None:
        path = self.path.split("?", 1)[0]
        fault = self.kodo._fault_for(self.command, path)
        if fault == "drop":
            n = int(self.headers.get("Content-Length") or 0)
            self._body(limit=n // 2)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            with self.kodo._lock:
                self.kodo.requests.append((self.command, self.path, -1))
            return
        try:
            if isinstance(fault, int):
                self._body()
                raise KodoError(fault, "injected fault")
            if self.command == "GET" and path.startswith("/~dl/"):
                self._download(path, cut=fault == "cut")
                return
            self._reply(200, self._route(path))
        except KodoError as exc:
            self._reply(exc.status, {"error": exc.message})
        except (KeyError, ValueError) as exc:
            self._reply(400, {"error": f"bad request: {exc}"})

    do_GET = do_POST = do_PUT = do_DELETE = _dispatch

    def _download(self, path: str, *, cut: bool = False) -> None:
        bucket, _, key = path[len("/~dl/"):].partition("/")
        self.kodo.check_download(f"http://{self.headers.get('Host', '')}{self.path}")
        obj_path = self.kodo.object_path(bucket, unquote(key))
        if obj_path is None:
            raise KodoError(404, "no such file or directory")
        data = obj_path.read_bytes()
        start = 0
        ranged = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", ""))
        if ranged:
            start = int(ranged[1])
            if start >= len(data):
                raise KodoError(416, "requested range not satisfiable")
        end = start + (len(data) - start) // 2 if cut else len(data)
        with self.kodo._lock:
            self.kodo.requests.append((self.command, self.path, 206 if ranged else 200))
            self.kodo.bytes_sent += end - start
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Length", str(len(data) - start))
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("X-Reqid", secrets.token_hex(8))
        self.end_headers()
        self.wfile.write(data[start:end])
        if cut:  # the reply promised in full, half of it sent, the connection closed
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)

    def _up_token(self) -> str:
        auth = self.headers.get("Authorization", "")
        if not auth.startswith("UpToken "):
            raise KodoError(401, "bad token")
        return auth[len("UpToken "):]

    def _route(self, path: str) -> dict:
        kodo, method = self.kodo, self.command
        if method == "POST" and path == "/":
            return kodo.form_upload(*_multipart(self.headers.get("Content-Type", ""), self._body()))
        if method == "POST" and path.startswith("/mkblk/"):
            return kodo.mkblk(self._up_token(), int(path.split("/")[2]), self._body())
        if method == "POST" and path.startswith("/mkfile/"):
            segments = path.split("/")[2:]
            fsize = int(segments[0])
            key = None
            for name, value in zip(segments[1::2], segments[2::2]):
                if name == "key":
                    key = _unb64(value).decode()
            ctxs = [c for c in self._body().decode().split(",") if c]
            return kodo.mkfile(self._up_token(), fsize, key, ctxs)
        m = _V2.match(path)
        if m:
            bucket = unquote(m["bucket"])
            key = None if m["key"] == "~" else _unb64(m["key"]).decode()
            upload_id, n = m["id"], m["n"]
            if method == "POST" and upload_id is None:
                self._body()
                return kodo.init_upload(self._up_token(), bucket, key)
            if method == "PUT" and n is not None:
                return kodo.put_part(self._up_token(), bucket, key, upload_id, int(n), self._body(),
                                     self.headers.get("Content-MD5"))
            if method == "GET" and upload_id and n is None:
                return kodo.list_parts(self._up_token(), bucket, key, upload_id)
            if method == "POST" and upload_id and n is None:
                return kodo.complete(self._up_token(), bucket, key, upload_id, json.loads(self._body() or b"{}"))
            if method == "DELETE" and upload_id and n is None:
                return kodo.abort(self._up_token(), bucket, key, upload_id)
        if method == "GET" and path == "/list":
            kodo.check_mac(method, self.path, self.headers, b"")
            query = {k: v[-1] for k, v in parse_qs(self.path.partition("?")[2]).items()}
            return kodo.list_objects(query)
        for op in ("stat", "delete"):
            if method == "POST" and path.startswith(f"/{op}/"):
                body = self._body()
                kodo.check_mac(method, self.path, self.headers, body)
                return kodo.manage(op, path.split("/")[2])
        raise KodoError(404, f"no such API: {method} {path}")


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, bytes], Optional[bytes]]:
    m = re.search(r'boundary="?([^";]+)"?', content_type)
    if not m:
        raise KodoError(400, "not a multipart form")
    fields: dict[str, bytes] = {}
    file_data = None
    for part in body.split(b"--" + m.group(1).encode())[1:]:
        if part.startswith(b"--"):
            break
        head, _, content = part.partition(b"\r\n\r\n")
        content = content[:-2] if content.endswith(b"\r\n") else content
        name = re.search(rb'name="([^"]*)"', head)
        if not name:
            continue
        if name.group(1) == b"file":
            file_data = content
        else:
            fields[name.group(1).decode()] = content
    return fields, file_data
