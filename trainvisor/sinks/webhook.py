"""The webhook sink: the run's records POSTed as JSON to a URL, in batches, with epoch statistics
in ABEJA's shape (the bodies: `webhook_batch.py`).

It runs on its own thread (registered not inline, `sinks/threaded.py`), and never sleeps there
while the run lasts: a failed request is retried later, when a `write` or the run's flush (once a
second) finds its backoff over, so the thread keeps taking records while the receiver is down.
Those records wait in the sink's own queue of `queue` records; while it is full a new record is
dropped and counted, exactly (the records held are the oldest: a receiver that comes back gets
the run from where it lost it). Only at the end of the run does the sink wait between attempts,
at most `retries` times per request, within the run's close timeout.

What is retried: a refused or broken connection, a timeout, 408, 425, 429 and 5xx (a
`Retry-After` in seconds is honoured, up to `backoff_max`). Another status rejects the request:
its records are counted as failed, and the next request goes on. A retried request is sent again
with the same bytes and the same `batch` number, so a receiver that answered too late can tell a
repeat. A single record larger than `max_bytes` on its own is never cut: it is not sent, it is
logged and counted as failed (`too_large`). Redirects are not followed: the bearer token goes to
the configured URL only.

The token: the variable `token_env` names, read from the `credentials` file (KEY=value lines, as
`upload.credentials`) over the environment; never a config value, and never in a message.
"""
from __future__ import annotations

import base64
import logging
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from dataclasses import dataclass
from http.client import HTTPException
from typing import Callable, Mapping, Optional, Sequence

from ..errors import ConfigError
from ..events import Metric
from ..secrets import mask_url, remember
from .threaded import SinkCounts
from .webhook_batch import EpochStatistics, Item, encode, overhead, pack

__all__ = ["WebhookSink", "WebhookCounts", "DEFAULT_TOKEN_ENV", "DEFAULT_MAX_BYTES"]

log = logging.getLogger("trainvisor.sinks")

DEFAULT_TOKEN_ENV = "TRAINVISOR_WEBHOOK_TOKEN"
DEFAULT_MAX_BYTES = 1_000_000  # 1 MB, decimal: within what a receiver limited to 1 MiB accepts too
_RETRY_STATUS = frozenset({408, 425, 429}) | frozenset(range(500, 600))


@dataclass(frozen=True)
class WebhookCounts:
    """The sink's counters. Records are what the run gave it (metrics, checkpoint announcements,
    notices); statistics are the epochs it derived. `requests`: requests answered 2xx;
    `retries`: attempts that failed and were to be tried again; `rejected`: requests refused
    for good. `dropped`: records that found the queue full; `failed`: records in rejected
    requests, too large to send, or still held when the end of the run gave up; `held`: records
    waiting (statistics not counted)."""

    requests: int = 0
    delivered: int = 0
    statistics: int = 0
    retries: int = 0
    rejected: int = 0
    dropped: int = 0
    dropped_statistics: int = 0
    failed: int = 0
    too_large: int = 0
    held: int = 0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # the 3xx is returned as an HTTPError: the token is not sent elsewhere


class WebhookSink:
    """POSTs the run's records to `url` (see the module's docstring). Not thread-safe but for
    `delivery()`/`stats()`, which another thread may call: the registry runs it on its own thread."""

    name = "webhook"
    inline = False

    def __init__(self, url: str, *, token_env: Optional[str] = None, credentials: Optional[str] = None,
                 batch_seconds: float = 5.0, max_bytes: int = DEFAULT_MAX_BYTES, queue: int = 10000,
                 retries: int = 5, backoff: float = 1.0, backoff_max: float = 60.0, timeout: float = 10.0,
                 num_epochs: Optional[int] = None, run_id: str = "", environ: Optional[Mapping[str, str]] = None,
                 identity: Optional[Mapping[str, int]] = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], object] = time.sleep) -> None:
        self.url, basic = _check_url(url)
        self.shown_url = mask_url(url)
        self.batch_seconds, self.timeout = _number("batch_seconds", batch_seconds), _number("timeout", timeout)
        self.backoff, self.backoff_max = _number("backoff", backoff), _number("backoff_max", backoff_max)
        self.max_bytes, self.queue = _count("max_bytes", max_bytes), _count("queue", queue)
        self.retries = _count("retries", retries, low=0)
        self.run_id = str(run_id or "")
        self.identity = dict(identity or {})  # beside run_id in each body: which node of several sent it
        if self.max_bytes <= overhead(self.run_id, identity=self.identity) + 2:
            raise ConfigError(f"webhook sink: max_bytes {max_bytes} leaves no room for a record")
        self._headers = {"Content-Type": "application/json", "User-Agent": "trainvisor-webhook"}
        token = _token(token_env, credentials, environ)
        remember([token])  # under any variable's name: a receiver's error that quotes it is masked
        if token or basic:
            self._headers["Authorization"] = "Bearer " + token if token else basic
        self._statistics = EpochStatistics(None if num_epochs is None else _count("num_epochs", num_epochs))
        self._opener = urllib.request.build_opener(_NoRedirect)
        self._clock, self._sleep = clock, sleep
        self._items: deque[Item] = deque()
        self._room = self.max_bytes - overhead(self.run_id, identity=self.identity)
        self._held_bytes = 0
        self._since = 0.0  # when the batch now collecting began: its first record, or the last request
        self._dropping = False  # the queue is full: said once until a request gets through
        self._request: Optional[tuple[bytes, dict[str, int]]] = None  # the head's body, kept for retries
        self._batch = 1
        self._failures = 0  # failed attempts in a row
        self._next_try = 0.0
        self._lock = threading.Lock()  # the counters, read by the run's thread
        self._c = dict.fromkeys(WebhookCounts.__dataclass_fields__, 0)
        self._closed = False

    # -- the sink --------------------------------------------------------------------------------
    def write(self, events: Sequence[object]) -> None:
        for ev in events:
            if type(ev) is Metric:
                for st in self._statistics.add(ev):
                    self._hold(encode("statistics", st))
                self._hold(encode("metrics", ev.to_json_dict()))
            else:
                self._hold(encode("events", ev.to_json_dict()))
        self._pump()

    def flush(self) -> None:
        self._pump()

    def close(self) -> None:
        """Send what is held (the last epoch's statistics too), trying each request at most
        `retries` more times (at least once), the backoff waited between attempts; what is still
        held then is counted as failed."""
        if self._closed:
            return
        self._closed = True
        for st in self._statistics.finish():
            self._hold(encode("statistics", st))
        # the end restarts the backoff: a receiver down for long left the next attempt up to
        # backoff_max away, more than the run's close timeout
        self._failures, self._next_try = 0, min(self._next_try, self._clock() + self.backoff)
        tries = 0
        while self._items and tries < max(1, self.retries):
            wait = self._next_try - self._clock()
            if wait > 0:
                self._sleep(wait)
            if self._send_head():
                tries = 0
            else:
                tries += 1
        if self._items:
            lost = sum(1 for i in self._items if i.kind != "statistics")
            self._count(failed=lost, held=-lost)
            log.error("webhook %s: %d record(s) undelivered at the end of the run (receiver still failing after "
                      "%d retries)", self.shown_url, lost, self.retries)
            self._items.clear()
        c = self.stats()
        log.info("webhook %s: %d request(s), %d record(s) and %d epoch statistics delivered, %d retried attempt(s), "
                 "%d dropped (queue full), %d failed", self.shown_url, c.requests, c.delivered, c.statistics,
                 c.retries, c.dropped, c.failed)

    def stats(self) -> WebhookCounts:
        with self._lock:
            return WebhookCounts(**self._c)

    def delivery(self) -> SinkCounts:
        """The records the run gave this sink: delivered (`written`), dropped, failed. A
        ThreadedSink reports these instead of its own 'write returned' (sinks/threaded.py)."""
        c = self.stats()  # records still held are unwritten: a sink abandoned at the end leaves some
        return SinkCounts(self.name, c.delivered, c.dropped + c.held, c.failed)

    # -- the queue -------------------------------------------------------------------------------
    def _hold(self, item: Item) -> None:
        record = item.kind != "statistics"
        if len(item.data) > self._room:
            self._count(too_large=1, failed=int(record))
            log.error("webhook %s: a %s record of %d bytes is larger than max_bytes %d on its own: not sent",
                      self.shown_url, item.kind, len(item.data), self.max_bytes)
            return
        if len(self._items) >= self.queue:
            self._pump()  # a full queue is a full batch: sent now, unless the receiver is backing off
        if len(self._items) >= self.queue:
            if not self._dropping:
                self._dropping = True
                log.warning("webhook %s: its queue of %d records is full (receiver down?): dropping new records, "
                            "counted", self.shown_url, self.queue)
            self._count(**{"dropped" if record else "dropped_statistics": 1})
            return
        if not self._items:
            self._since = self._clock()
        self._items.append(item)
        self._held_bytes += len(item.data) + 1
        self._count(held=int(record))

    def _pump(self) -> None:
        """Send what is due: a batch `batch_seconds` old, a full request or a full queue, once the
        backoff is over."""
        while self._items:
            now = self._clock()
            if now < self._next_try:
                return
            if (now - self._since < self.batch_seconds and self._held_bytes < self._room
                    and len(self._items) < self.queue):
                return
            if not self._send_head():
                return

    def _send_head(self) -> bool:
        """One request of the records at the head of the queue; False when it is to be retried."""
        if self._request is None:
            self._request = pack(self._items, batch=self._batch, max_bytes=self.max_bytes, run_id=self.run_id,
                                 identity=self.identity)
        body, kinds = self._request
        status, why, after = self._post(body)
        n = sum(kinds.values())
        records = n - kinds["statistics"]
        if status is not None and 200 <= status < 300:
            self._count(requests=1, delivered=records, statistics=kinds["statistics"], held=-records)
            self._dropping = False
            if self._failures:
                log.warning("webhook %s: receiving again after %d failed attempt(s)", self.shown_url, self._failures)
        elif status is None or status in _RETRY_STATUS:
            self._failures += 1
            self._count(retries=1)
            delay = min(self.backoff_max, max(after or 0.0, self.backoff * 2 ** min(self._failures - 1, 30)))
            self._next_try = self._clock() + delay
            if self._failures == 1 or self._closed:
                log.warning("webhook %s: %s; records held, next attempt in %gs", self.shown_url, why, delay)
            return False
        else:
            self._count(rejected=1, failed=records, held=-records)
            log.error("webhook %s: %s; %d record(s) not delivered%s", self.shown_url, why, records,
                      " (lower sinks.options.webhook.max_bytes)" if status == 413 else "")
        for _ in range(n):
            self._held_bytes -= len(self._items.popleft().data) + 1
        self._request, self._failures, self._next_try = None, 0, 0.0
        self._batch += 1
        self._since = self._clock()
        return True

    def _post(self, body: bytes) -> tuple[Optional[int], str, Optional[float]]:
        """(HTTP status or None when no answer came, what happened, Retry-After seconds)."""
        req = urllib.request.Request(self.url, data=body, headers=self._headers, method="POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                resp.read()
                return resp.status, f"HTTP {resp.status}", None
        except urllib.error.HTTPError as exc:
            with exc:
                after = exc.headers.get("Retry-After", "") if exc.headers else ""
                return exc.code, f"HTTP {exc.code} {exc.reason}", float(after) if after.isdigit() else None
        except (OSError, HTTPException) as exc:  # refused, reset, timed out: no answer, retried
            reason = getattr(exc, "reason", None) or exc
            return None, f"no answer ({type(exc).__name__}: {mask_url(str(reason))})", None

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self._c[k] += v


# -- options -------------------------------------------------------------------------------------

def _check_url(url: object) -> tuple[str, str]:
    """The URL requests go to, without a `user:password@` (urllib would take it for the host), and
    the Basic authorization that pair makes ('' without one); a bearer token takes precedence."""
    if not isinstance(url, str) or not url:
        raise ConfigError("sink 'webhook' needs option `url` (sinks.options.webhook.url: http(s)://HOST/PATH)")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here, at start
    except ValueError as exc:
        raise ConfigError(f"webhook sink: url {mask_url(url)!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"webhook sink: url {mask_url(url)!r} is not an http:// or https:// URL with a host")
    if parts.username is None and parts.password is None:
        return url, ""
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    host = parts.netloc.rpartition("@")[2]
    return parts._replace(netloc=host).geturl(), "Basic " + base64.b64encode(pair.encode()).decode()


def _number(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        raise ConfigError(f"webhook sink: {name} must be a number of seconds >= 0, got {v!r}")
    return float(v)


def _count(name: str, v: object, low: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < low:
        raise ConfigError(f"webhook sink: {name} must be an integer >= {low}, got {v!r}")
    return v


def _token(token_env: Optional[str], credentials: Optional[str], environ: Optional[Mapping[str, str]]) -> str:
    """The bearer token, from the credentials file over the environment; '' when none is set and
    none was asked for. A named variable or file that gives none is a ConfigError (naming the
    variable and the file, never a value)."""
    from ..uploaders.credentials import CREDENTIAL_KEYS, read_credentials_file

    key = token_env or DEFAULT_TOKEN_ENV
    env = os.environ if environ is None else environ
    values = read_credentials_file(credentials, keys=CREDENTIAL_KEYS | {key},
                                   setting="sinks.options.webhook.credentials") if credentials else {}
    token = values.get(key) or env.get(key, "")
    if not token and (token_env or credentials):
        where = f"the credentials file {credentials} nor the environment" if credentials else "the environment"
        raise ConfigError(f"webhook sink: no bearer token: neither {where} sets {key}")
    return token
