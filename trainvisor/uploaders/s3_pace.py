"""S3 requests that carry a file's bytes (PutObject, UploadPart) wait for their tokens before they
are sent, so the rate limit holds on the wire and not only on average: the part workers of a
multipart upload would otherwise all send at once and pay afterwards.

Hooked from outside the adapter, on the boto3 client's `before-send` event (its handlers run on
the sending thread, just before the bytes go; one that raises ends the request), so s3.py keeps
one concern. A request botocore sends again after a network error pays again: it is sent again.
"""
from __future__ import annotations

import sys
from typing import Callable, Optional

__all__ = ["pace_requests"]

_OPERATIONS = ("PutObject", "UploadPart")


def pace_requests(uploader: object, take: Callable[[int], object]) -> Optional[Callable[[], None]]:
    """Make `uploader`'s data requests call `take(bytes)` before they are sent, when it is an
    S3Uploader (its module already loaded: one was built); the function that undoes it (a closed
    manager's hook must not outlive it: the uploader may serve another). None for any other
    store: its bytes are paid through the upload's progress callback instead."""
    s3 = sys.modules.get("trainvisor.uploaders.s3")
    if s3 is None or not isinstance(uploader, s3.S3Uploader):
        return None

    def before_send(request, **_kwargs) -> None:
        length = request.headers.get("Content-Length")
        take(int(length) if length else 0)
        return None  # no response of ours: botocore sends the request

    events = uploader._client.meta.events  # the adapter's boto3 client, shared by its part workers
    hooks = [(f"before-send.s3.{op}", f"trainvisor-pace-{op}-{id(before_send)}") for op in _OPERATIONS]
    for event, unique_id in hooks:
        events.register(event, before_send, unique_id=unique_id)

    def unpace() -> None:
        for event, unique_id in hooks:
            events.unregister(event, unique_id=unique_id)

    return unpace
