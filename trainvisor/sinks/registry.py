"""Sink registry: a name in the config (`sinks.use`, `--sink NAME`) -> a factory that makes the sink.

Built-in sinks are registered here; a pip-installed package adds one through the entry point group
`trainvisor.sinks` (`my-sink = my_package:MySink`), read only when a run names a sink that is not
registered, so a run that uses none pays nothing at start. As in pluggy, a malformed sink is
rejected where it is registered, naming it (a factory that is not callable, a class without
`write`); what a factory makes is checked when the run builds it, before the child starts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, TypeVar

from ..errors import ConfigError

if TYPE_CHECKING:
    from .context import SinkContext

__all__ = ["SinkInfo", "register_sink", "available_sinks", "get_sink_info", "make_sink", "check_sink",
           "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "trainvisor.sinks"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_METHODS = ("write", "flush", "close")

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True)
class SinkInfo:
    """A registered sink. `inline`: cheap enough to run on the pipeline thread (the file sinks);
    otherwise it gets its own thread behind a bounded queue, so it can never slow parsing."""

    name: str
    factory: Callable[..., object]
    inline: bool = False
    description: str = ""
    wants_context: bool = False
    """The factory has a `context` parameter: the run hands it a `SinkContext` (run id, config,
    a `status()` snapshot); a factory without one is never given it."""


_REGISTRY: dict[str, SinkInfo] = {}


def register_sink(name: str, factory: Optional[F] = None, *, inline: bool = False,
                  description: str = "") -> Any:
    """Register `factory` (a class or a function; called with the sink's options as keyword
    arguments) under `name`. Also a decorator: `@register_sink("my-sink")`. ConfigError, naming
    the sink, for a bad name, a factory that is not callable, a class lacking a sink method, or a
    name already taken by another factory."""
    if factory is None:
        return lambda f: register_sink(name, f, inline=inline, description=description)
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(f"sink {name!r}: a sink name is letters, digits, '-', '_' or '.'")
    if not callable(factory):
        raise ConfigError(f"sink {name!r}: its factory must be callable (a class or a function), got {factory!r}")
    if isinstance(factory, type):
        missing = [m for m in _METHODS if not callable(getattr(factory, m, None))]
        if missing:
            raise ConfigError(f"sink {name!r}: class {factory.__qualname__} has no method {missing[0]}()")
    old = _REGISTRY.get(name)
    if old is not None and old.factory is not factory:
        raise ConfigError(f"sink {name!r} is registered twice ({old.factory!r} and {factory!r})")
    _REGISTRY[name] = SinkInfo(name, factory, bool(inline), description or _first_line(factory),
                               _has_context_parameter(factory))
    return factory


def available_sinks() -> tuple[str, ...]:
    """Every sink name a run may use: registered ones and installed packages' entry points."""
    return tuple(sorted(set(_REGISTRY) | {ep.name for ep in _entry_points()}))


def get_sink_info(name: str) -> SinkInfo:
    """The sink registered as `name`, loading an installed package's entry point when it is not;
    a one-line ConfigError for a name no one registered ("did you mean ...")."""
    info = _REGISTRY.get(name)
    if info is not None:
        return info
    for ep in _entry_points():
        if ep.name == name:
            return _load_entry_point(ep)
    raise _unknown(name)


def make_sink(name: str, options: Mapping[str, Any], context: Optional["SinkContext"] = None
              ) -> tuple[SinkInfo, object]:
    """The sink `name` made with `options` (and the run's `context`, when its factory asks for
    one), checked; a one-line ConfigError naming it otherwise."""
    info = get_sink_info(name)
    kwargs = _plain(options)
    if "context" in kwargs:
        raise ConfigError(f"sinks.options.{name}.context: `context` is given by the run, not an option")
    if info.wants_context and context is not None:
        kwargs["context"] = context
    try:
        sink = info.factory(**kwargs)
    except ConfigError as exc:  # the factory's own words, said once, after the sink's name
        raise ConfigError(f"sink {name!r}: {_without_name(str(exc), name)}") from exc
    except Exception as exc:  # a bad option or a failing constructor: the user's to fix, before the child starts
        raise ConfigError(f"sink {name!r}: cannot be made with options {_shown(_plain(options))!r}: "
                          f"{type(exc).__name__}: {exc}") from exc
    check_sink(sink, name)
    return info, sink


def check_sink(sink: object, label: str) -> None:
    """ConfigError unless `sink` has a `name` and callable `write`, `flush` and `close`."""
    for method in _METHODS:
        if not callable(getattr(sink, method, None)):
            raise ConfigError(f"sink {label!r}: {type(sink).__qualname__} object has no method {method}()")
    name = getattr(sink, "name", None)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"sink {label!r}: {type(sink).__qualname__} object has no `name` (a non-empty string)")


# -- entry points and errors -----------------------------------------------------------------------

def _entry_points() -> tuple:
    from importlib.metadata import entry_points  # only for a name not built in: not on every start

    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _without_name(message: str, name: str) -> str:
    """A factory's message without the sink's name it starts with ("prometheus sink: port ..."),
    so the one line names the sink once."""
    for prefix in (f"{name} sink: ", f"sink {name!r}: ", f"sink {name}: "):
        if message.startswith(prefix):
            return message[len(prefix):]
    return message


def _has_context_parameter(factory: Callable[..., object]) -> bool:
    import inspect  # already loaded by dataclasses: costs nothing at start

    try:
        return "context" in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # a builtin or a C callable without a signature
        return False


def _load_entry_point(ep: Any) -> SinkInfo:
    where = f"entry point {ep.name} = {ep.value}" + (f" of {ep.dist.name}" if getattr(ep, "dist", None) else "")
    try:
        factory = ep.load()
    except Exception as exc:  # a broken plug-in package is a configuration error, named
        raise ConfigError(f"sink {ep.name!r} ({where}): cannot be loaded: {type(exc).__name__}: {exc}") from exc
    if ep.name not in _REGISTRY:  # a module may register itself on import
        register_sink(ep.name, factory, inline=bool(getattr(factory, "inline", False)))
    return _REGISTRY[ep.name]


def _unknown(name: str) -> ConfigError:
    import difflib

    known = available_sinks()
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else "available: " + ", ".join(known)
    return ConfigError(f"unknown sink {name!r} ({hint})")


def _plain(options: Mapping[str, Any]) -> dict[str, Any]:
    """The config's frozen tables as the dicts and lists a factory expects."""
    def thaw(v: Any) -> Any:
        if isinstance(v, Mapping):
            return {k: thaw(x) for k, x in v.items()}
        return [thaw(x) for x in v] if isinstance(v, tuple) else v

    return {str(k): thaw(v) for k, v in options.items()}


def _shown(options: Any) -> Any:
    """Options as an error may print them: the password of a URL among them masked (a webhook's)."""
    from ..secrets import mask_url

    if isinstance(options, dict):
        return {k: _shown(v) for k, v in options.items()}
    if isinstance(options, list):
        return [_shown(v) for v in options]
    return mask_url(options) if isinstance(options, str) else options


def _first_line(obj: object) -> str:
    doc = getattr(obj, "__doc__", None) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


# -- built-ins: cheap file and count sinks, made on the pipeline thread ----------------------------

def _jsonl(path: str, mode: str = "a") -> object:
    """Another JSONL file of the run's records (appended to by default, as the run's own)."""
    from .jsonl import JsonlSink

    return JsonlSink(path, mode=mode)


def _caffe_csv(outdir: str = ".", basename: str = "train") -> object:
    """Caffe parse_log.py tables: OUTDIR/BASENAME.train and .test, written at the end."""
    from .caffe_csv import CaffeCsvSink

    return CaffeCsvSink(outdir, basename)


def _stats() -> object:
    """Counts of metrics and checkpoint announcements (what the summary shows)."""
    from .stats import StatsSink

    return StatsSink()


register_sink("jsonl", _jsonl, inline=True)
register_sink("caffe-csv", _caffe_csv, inline=True)
register_sink("stats", _stats, inline=True)


def _prometheus(host: str = "127.0.0.1", port: int = 0, run_id: str = "", labels: Optional[dict] = None,
                context: Optional["SinkContext"] = None) -> object:
    """The latest value of each metric, the run's status and counts on http://HOST:PORT/metrics."""
    from .prometheus import PrometheusSink  # prometheus_client loads only when a run names this sink

    healthz = None
    if context is not None:
        run_id = run_id or context.run_id
        health = getattr(context.config, "health", None)
        if health is not None and health.port is None:  # no server of its own: /healthz here
            healthz = _healthz(context.status, health.max_metric_age)
    return PrometheusSink(host=host, port=port, run_id=run_id, labels=labels,
                          status=context.status if context is not None else None, healthz=healthz,
                          identity=context.identity if context is not None else None)


def _healthz(status, max_metric_age):
    """A run's /healthz answer (status.health_of), its "since the start" counted from now."""
    import time

    from ..status import health_of

    started = time.monotonic()
    return lambda: health_of(status(), max_metric_age=max_metric_age, since_start=time.monotonic() - started)


# Inline: its write only sets values under a lock; the text is rendered on the scrape's thread.
register_sink("prometheus", _prometheus, inline=True)


# -- TensorBoard and per-phase CSV (issue 20) -------------------------------------------------------

def _tensorboard(dir: str = "", rank_wait: int = 1000, rank_wait_seconds: float = 30.0) -> object:
    """TensorBoard scalars in DIR (tensorboardX): PHASE/NAME tags, step = iteration or epoch."""
    if not dir:
        raise ConfigError("needs option `dir` (sinks.options.tensorboard.dir)")
    from .tensorboard import TensorBoardSink

    return TensorBoardSink(dir, rank_wait=rank_wait, rank_wait_seconds=rank_wait_seconds)


def _phase_csv(dir: str = "") -> object:
    """One CSV per phase in DIR (train.csv, val.csv, test.csv): a column per metric."""
    if not dir:
        raise ConfigError("needs option `dir` (sinks.options.csv.dir)")
    from .phase_csv import PhaseCsvSink

    return PhaseCsvSink(dir)


register_sink("tensorboard", _tensorboard)  # its own thread: the writer's import and I/O stay off the pipeline
register_sink("csv", _phase_csv, inline=True)


# -- webhook (issue 20) ----------------------------------------------------------------------------

def _webhook(url: str = "", context: Optional["SinkContext"] = None, **options: Any) -> object:
    """Batched JSON POSTs to URL: raw records and epoch statistics (ABEJA's shape), retried."""
    if not url:
        raise ConfigError("needs option `url` (sinks.options.webhook.url, or --webhook URL)")
    from .webhook import WebhookSink

    if context is not None and not options.get("run_id"):  # the receiver can tell runs apart
        options["run_id"] = context.run_id
    if context is not None and context.identity and "identity" not in options:
        options["identity"] = context.identity  # and the node of several that sends it
    upload = getattr(context.config, "upload", None) if context is not None else None
    if upload is not None and upload.credentials and "credentials" not in options:
        options["credentials"] = upload.credentials  # the run's credentials file (--credentials)
    return WebhookSink(url, **options)


register_sink("webhook", _webhook)  # its own thread: a request may wait seconds for the receiver


# -- MLflow (issue 20) --------------------------------------------------------------------------------

def _mlflow(tracking_uri: str = "", experiment: str = "", run_name: str = "", tags: Optional[dict] = None,
            context: Any = None) -> object:
    """An MLflow run (MlflowClient): the config as params, PHASE/NAME metrics with steps, the status."""
    from .mlflow_sink import MlflowSink  # checks that mlflow is installed; imports it only on its own thread

    return MlflowSink(tracking_uri=tracking_uri, experiment=experiment, run_name=run_name, tags=tags,
                      context=context)


register_sink("mlflow", _mlflow)  # its own thread: mlflow's import and the store's I/O stay off the pipeline
