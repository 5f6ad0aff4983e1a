"""`GET /healthz`: is the training alive and still saying something, for a container's probes.

Served on a small HTTP server of its own (127.0.0.1 by default: a probe runs on the node, or in
the pod's network namespace), on its own thread, from `Run.status()`: one frozen snapshot per
request, so a probe costs the run nothing between probes. The body is one JSON object (the
child's state, its attempt, seconds since the last metric, the upload backlog); the status is
200 while the child runs and has printed a metric within `health.max_metric_age` seconds (or
since the server started, before the first), else 503 with the reason: a probe only reads the
code, a person reads the reason.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Callable, Optional

from ..secrets import mask_text
from ..status import health_of

if TYPE_CHECKING:
    from ..status import RunStatus

__all__ = ["HealthServer", "health_of"]  # health_of: the pure judgement, in status.py

log = logging.getLogger("trainvisor")


class HealthServer:
    """`/healthz` on (host, port) from `status`, from `start()` until `close()`; port 0 picks one."""

    def __init__(self, status: Callable[[], "RunStatus"], *, host: str = "127.0.0.1", port: int = 0,
                 max_metric_age: Optional[float] = None, clock: Callable[[], float] = time.monotonic) -> None:
        started = clock()
        judge = lambda: health_of(status(), max_metric_age=max_metric_age, since_start=clock() - started)  # noqa: E731

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] != "/healthz":
                    self._reply(404, {"error": "not found: GET /healthz"})
                    return
                try:
                    code, body = judge()
                except Exception as exc:  # a bug of ours must not end the server: the probe sees it
                    # masked: whoever can reach the port is not owed a password an exception quotes
                    code, body = 500, {"ok": False, "reason": mask_text(f"{type(exc).__name__}: {exc}")}
                self._reply(code, body)

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, fmt: str, *args: object) -> None:  # probes are not news
                pass

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            from ..errors import ConfigError

            raise ConfigError(f"health: cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        self._server.daemon_threads = True
        self.host, self.port = host, self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="trainvisor-health", daemon=True)

    def start(self) -> "HealthServer":
        self._thread.start()
        log.info("health: serving http://%s:%d/healthz", self.host, self.port)
        return self

    def close(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join()
        self._server.server_close()
