"""What both ends of the Kodo-protocol test server share: urlsafe base64 as qiniu writes it, and
the error a request fails with (its HTTP status and message, as the SDK reads them)."""
from __future__ import annotations

import base64

__all__ = ["KodoError", "_b64", "_unb64"]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class KodoError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message
