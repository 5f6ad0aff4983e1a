"""A Prometheus sink: the run's latest values on `/metrics`, served by its own HTTP server.

Why one gauge family `trainvisor_metric` with the metric's name as a label (`metric="loss"`)
instead of one family per name: a training's metric names are arbitrary text (`loss/total`,
`Train net output #1`, `val_acc@1`), and Prometheus family names are not. Sanitising them into
family names loses information and can make two names collide (`loss/total` and `loss_total`);
a label value takes any text unchanged, so a series names exactly what metrics.jsonl names,
and one PromQL selector (`trainvisor_metric{phase="test"}`) finds them all.

Why inline (on the pipeline thread): `write` only updates a dictionary under a lock (in C), a
tenth of the stats sink; the costly part, rendering the text, happens on the scrape's thread. The state
is read under the same lock at scrape time, so a scrape sees whole batches: the counters and the
latest values always agree with one prefix of the run's records.

The registry is the sink's own (never prometheus_client's global one), so two sinks in one
process, or a test, never share series.
"""
from __future__ import annotations

import errno
import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence

from ..errors import ConfigError
from ..events import CheckpointEvent, Event, Metric

if TYPE_CHECKING:
    from ..status import RunStatus

try:
    from ._format import latest_update as _c_latest
except ImportError:  # not built (no compiler at install): the Python loop
    _c_latest = None
_FAST = not os.environ.get("TRAINVISOR_PURE_PYTHON")  # TRAINVISOR_PURE_PYTHON=1: the Python loop

__all__ = ["PrometheusSink", "RESERVED_LABELS"]

log = logging.getLogger("trainvisor")

RESERVED_LABELS = ("run_id", "metric", "phase", "test_net", "rank", "node", "process_rank")
"""Labels the sink sets itself; a user label may not take one of these names."""

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_POSITIONS = tuple(Metric._fields.index(f) for f in ("name", "phase", "test_net", "rank", "value", "iteration", "epoch"))


def _text(label: object) -> str:
    """A test net's or rank's label value: "" for none."""
    return "" if label is None else str(label)


def _write_python(events: Sequence[Event], latest: dict, iteration: dict, epoch: dict) -> tuple[int, int]:
    """`PrometheusSink.write`'s loop (the C one's reference): (metrics, checkpoints) seen."""
    metrics = checkpoints = 0
    for ev in events:
        if type(ev) is Metric:
            rank = ev.rank
            latest[(ev.name, ev.phase, ev.test_net, rank)] = ev.value
            metrics += 1
        elif isinstance(ev, CheckpointEvent):
            rank = None  # an announcement carries no rank: the rank-less series moves
            checkpoints += 1
        else:
            continue
        if ev.iteration is not None:
            iteration[rank] = ev.iteration
        if ev.epoch is not None:
            epoch[rank] = ev.epoch
    return metrics, checkpoints

class _State:
    """What the sink has seen, written by the pipeline thread and read by scrapes, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        # raw keys, as the records have them (a test net and a rank are ints or None)
        self.latest: dict[tuple, float] = {}  # (metric, phase, test_net, rank) -> value
        self.iteration: dict = {}  # rank -> last iteration seen
        self.epoch: dict = {}  # rank -> last epoch seen
        self.metrics = 0
        self.checkpoints = 0


class PrometheusSink:
    """Serves the latest value of each metric, per (name, phase, test net, rank), and the run's
    iteration, epoch and counts on http://HOST:PORT/metrics from when it is made until `close()`.

    `port` 0 takes a free port (logged; `self.port` is the bound one). `run_id` and `labels`
    (`{name: value}`) are put on every series, so several runs scraped by one Prometheus stay
    apart. `status` (the run's `Run.status`, given through the sink's context) adds the run's
    state at scrape time: attempt, child state, lines, records, faults, checkpoints and uploads.
    A port already in use, or a bad label name, is a one-line ConfigError."""

    name = "prometheus"
    inline = True

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, run_id: str = "",
                 identity: Optional[Mapping[str, int]] = None,
                 labels: Optional[Mapping[str, Any]] = None,
                 status: Optional[Callable[[], "RunStatus"]] = None,
                 healthz: Optional[Callable[[], tuple[int, dict]]] = None) -> None:
        try:
            from prometheus_client import CollectorRegistry  # loaded only when a run names this sink
        except ImportError as exc:
            raise ConfigError("prometheus sink: needs the prometheus_client package "
                              "(pip install prometheus_client)") from exc
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ConfigError(f"prometheus sink: port must be an integer 0..65535 (0: a free port), got {port!r}")
        # `identity`: the node and process rank of a run of several nodes (`identity.NodeIdentity`),
        # so each node's series stay its own when one Prometheus scrapes them all.
        self._base = {"run_id": str(run_id), **{k: str(v) for k, v in (identity or {}).items()},
                      **_user_labels(labels or {})}
        self._state = _State()
        self._status = status
        self._status_failed = False
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self._server, self._thread = _serve(host, port, self.registry)
        self.host = host
        self.port: int = self._server.server_address[1]
        log.info("prometheus sink: serving http://%s:%d/metrics", host, self.port)
        if healthz is not None:  # the run's /healthz on the same port (run/health.py's answer)
            self._server.set_app(_with_healthz(self._server.get_app(), healthz))
            log.info("health: serving http://%s:%d/healthz", host, self.port)

    # -- the sink --------------------------------------------------------------------------------
    def write(self, events: Sequence[Event]) -> None:
        """Each metric's value under its raw key (name, phase, test net, rank), and each rank's
        last iteration and epoch; the labels' text is made at scrape time, once a series. This
        runs for every record of a run on the pipeline thread: in C when the sinks' extension is
        built (_latest.c: ~0.03 us a metric, a tenth of the loop below, which is its reference)."""
        st = self._state
        with st.lock:
            if _c_latest is not None and _FAST:
                metrics, checkpoints = _c_latest(events, Metric, CheckpointEvent, _POSITIONS,
                                                 st.latest, st.iteration, st.epoch)
            else:
                metrics, checkpoints = _write_python(events, st.latest, st.iteration, st.epoch)
            st.metrics += metrics
            st.checkpoints += checkpoints

    def flush(self) -> None:
        pass

    def close(self) -> None:
        """Stop serving: the listening socket closed and the server's thread joined."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        self._thread.join()
        log.info("prometheus sink: stopped serving port %d", self.port)

    # -- the collector (called by the scrape's thread) -------------------------------------------
    def collect(self) -> Iterator[Any]:
        """The families built from one consistent copy of the state."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        st = self._state
        with st.lock:
            latest, iteration, epoch = dict(st.latest), dict(st.iteration), dict(st.epoch)
            metrics, checkpoints = st.metrics, st.checkpoints
        iteration = {_text(r): float(v) for r, v in iteration.items()}
        epoch = {_text(r): float(v) for r, v in epoch.items()}
        base_names, base_values = list(self._base), list(self._base.values())
        series = GaugeMetricFamily("trainvisor_metric", "The latest value of each parsed metric (NaN kept as NaN).",
                                   labels=base_names + ["metric", "phase", "test_net", "rank"])
        for (name, phase, test_net, rank), value in latest.items():
            series.add_metric(base_values + [name, phase, _text(test_net), _text(rank)], value)
        yield series
        for fam, doc, values in (("trainvisor_iteration", "The last iteration a record named, per rank.", iteration),
                                 ("trainvisor_epoch", "The last epoch a record named, per rank.", epoch)):
            g = GaugeMetricFamily(fam, doc, labels=base_names + ["rank"])
            for rank, v in values.items():
                g.add_metric(base_values + [rank], v)
            yield g
        for fam, doc, n in (("trainvisor_metrics", "Metric records seen.", metrics),
                            ("trainvisor_checkpoint_announcements", "Checkpoint announcements seen.", checkpoints)):
            c = CounterMetricFamily(fam, doc, labels=base_names)
            c.add_metric(base_values, n)
            yield c
        if self._status is not None:
            yield from self._status_families(base_names, base_values)

    def _status_families(self, names: list, values: list) -> Iterator[Any]:
        """The run's state, from one `RunStatus` snapshot taken now. A failing status call is
        logged once and leaves these families out: the scrape itself never fails."""
        from .prometheus_status import status_families

        try:
            status = self._status()
        except Exception as exc:
            if not self._status_failed:
                self._status_failed = True
                log.error("prometheus sink: the run's status failed: %s: %s", type(exc).__name__, exc)
            return
        yield from status_families(status, names, values)


def _user_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """The config's `labels`, checked: Prometheus' label-name rules, none of the sink's own."""
    if not isinstance(labels, Mapping):
        raise ConfigError(f"prometheus sink: labels must be a table of name: value, got {labels!r}")
    out: dict[str, str] = {}
    for k, v in labels.items():
        k = str(k)
        if not _LABEL.match(k) or k.startswith("__"):
            raise ConfigError(f"prometheus sink: label {k!r} is not a Prometheus label name "
                              "(letters, digits and '_', not starting with a digit or '__')")
        if k in RESERVED_LABELS:
            raise ConfigError(f"prometheus sink: label {k!r} is set by the sink itself "
                              f"(reserved: {', '.join(RESERVED_LABELS)})")
        out[k] = "" if v is None else str(v)
    return out


def _with_healthz(app: Callable, healthz: Callable[[], tuple[int, dict]]) -> Callable:
    """prometheus_client's WSGI app with GET /healthz answered by `healthz()` (code, JSON body)."""
    import json
    from http import HTTPStatus

    def wsgi(environ: dict, start_response: Callable) -> Any:
        if environ.get("PATH_INFO") != "/healthz":
            return app(environ, start_response)
        try:
            code, body = healthz()
        except Exception as exc:  # a bug of ours must not end the server: the probe sees it
            code, body = 500, {"ok": False, "reason": f"{type(exc).__name__}: {exc}"}
        data = json.dumps(body).encode()
        start_response(f"{code} {HTTPStatus(code).phrase}",
                       [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return wsgi


STOP_POLL = 0.05
"""Seconds between the server loop's looks at a stop request: `close` waits at most that long
(prometheus_client's own `start_http_server` polls every 0.5 s, which every run then waited at
its end)."""


def _serve(host: str, port: int, registry: Any) -> tuple[Any, threading.Thread]:
    """prometheus_client's WSGI app on (host, port), served as its `start_http_server` serves it
    (a thread per request, IPv4 or IPv6 as the address says, no request logging), from a loop of
    ours that a stop request ends within STOP_POLL; its thread named for the leak checks."""
    import socket
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
            pass

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("PrometheusServer", (ThreadingWSGIServer,), {"address_family": family})
        server = make_server(host, port, make_wsgi_app(registry), server_class, handler_class=Quiet)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(f"prometheus sink: port {port} on {host} is in use; choose another "
                              "sinks.options.prometheus.port, or 0 for a free one") from exc
        raise ConfigError(f"prometheus sink: cannot serve on {host}:{port}: {exc.strerror or exc}") from exc
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": STOP_POLL},
                              name="trainvisor-prometheus", daemon=True)
    thread.start()
    return server, thread
