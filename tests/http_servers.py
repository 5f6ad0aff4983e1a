"""An HTTP server for the tests' own servers (the Kodo-protocol server, the fault proxy) that knows
its open connections, so a test can cut them all at once (`close_connections`: a store "down",
or the end of a test: no keep-alive handler thread outlives it), and for which a client hanging
up mid-reply (a download cut short, a killed client) is expected, not a server error."""
from __future__ import annotations

import socket
import sys
import threading
from http.server import ThreadingHTTPServer

__all__ = ["TrackingServer"]


class TrackingServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        """Shut every open connection down, so its handler thread ends."""
        with self._open_lock:
            conns = list(self._open)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
