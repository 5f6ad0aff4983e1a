"""Turning config sections into the parts of a run: the parser, the sinks, the checkpoint watcher
and the upload manager. Each builder checks its section before anything starts, so a bad pattern,
policy, rules file or destination fails in one line before the training is launched, not ten
hours into it. Heavy libraries (watchdog, boto3, qiniu, yaml) are imported only by the builder
whose feature the run uses."""
from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Callable, Optional, Sequence

from ..config import ParsingConfig, SinksConfig, StopConfig, UploadConfig, WatchConfig
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..identity import NodeIdentity
    from ..parsers.base import Parser
    from ..sinks.context import SinkContext
    from ..stoprules import Firing, StopRuleSink
    from ..uploaders.base import Uploader
    from ..uploaders.group import ManagerGroup
    from ..uploaders.manager import UploadManager
    from ..uploaders.ratelimit import TokenBucket
    from ..uploaders.values import BestByValues
    from ..watch.watcher import CheckpointConsumer, CheckpointWatcher

__all__ = ["build_parser", "build_sinks", "build_watcher", "build_manager", "build_managers", "build_limiter",
           "open_destinations", "watch_dirs", "build_stop_rules", "retention_values"]

log = logging.getLogger("trainvisor.run")


def build_parser(cfg: ParsingConfig, *, argv: Sequence[str], year: int) -> "Parser":
    """The configured parser (auto by default), with its rules file loaded first, behind the
    `RankRouter` that strips launchers' rank prefixes and gives each rank a parser of its own."""
    from ..parsers import BUILTIN_MODULES, ParserOptions
    from ..stream.ranks import RankRouter, parse_rank_selection

    options = ParserOptions(year=cfg.year or year, iters_per_epoch=cfg.iters_per_epoch, argv=tuple(argv))

    def make() -> "Parser":
        from ..parsers.select import build_parser as select_parser

        return select_parser(cfg.parser, options, rules=cfg.rules)

    # A built-in parser without a rules file cannot fail to be made: it is made at the first output,
    # the child running (RankRouter's `name`); any other now, so a bad name or file fails first.
    deferred = cfg.rules is None and cfg.parser in BUILTIN_MODULES
    return RankRouter(make, parse_rank_selection(cfg.ranks), name=cfg.parser if deferred else None)


def build_sinks(cfg: SinksConfig, *, jsonl: object, objects: Sequence[object] = (),
                context: Optional["SinkContext"] = None, host: bool = False) -> list:
    """The run's sinks, each counted (`counts()`): its JSONL file, the registered sinks `sinks.use`
    names, made with their `sinks.options`, and the caller's objects, all checked before the child
    starts. A registered sink runs on its own thread unless registered `inline`; a caller's object
    runs inline unless it says `inline = False`, as every object passed to `Run` always has (it may
    count on being called on the pipeline thread, in order with the others). `context` (the run's
    id, directory, attempt and configuration: `sinks.context.SinkContext`) goes to the factories
    that ask for it. `host`: the sinks that only report run in the sink host's process
    (`sinks.host`; sinks/host/): each is made here too, to check its options, then left unused."""
    from ..sinks.threaded import CloseDeadline, CountingSink, ThreadedSink

    deadline = CloseDeadline(cfg.close_timeout)
    sinks: list = [CountingSink(jsonl, "jsonl")]

    def label(name: str) -> str:
        """The sink's name in the counts and the summary: a second sink of one name gets `#N`."""
        return name if all(s.name != name for s in sinks) else f"{name}#{len(sinks) + 1}"

    def add(sink: object, name: str, inline: bool) -> None:
        label_ = label(name)
        sinks.append(CountingSink(sink, label_) if inline else
                     ThreadedSink(sink, label_, capacity=cfg.queue, deadline=deadline, cpu_share=cfg.cpu_share))

    try:
        if cfg.use or cfg.options or objects:
            from ..sinks.registry import check_sink, make_sink

            for name in cfg.options:
                if name not in cfg.use:
                    raise ConfigError(f"sinks.options.{name}: no sink {name!r} in sinks.use (--sink {name})")
            hosted = _hosted_names(cfg, jsonl) if host and context is not None else ()
            for name in cfg.use:
                info, sink = make_sink(name, cfg.options.get(name, {}), context)
                if name in hosted:
                    sinks.append(_hosted_view(name, label(name)))
                    continue
                add(sink, name, info.inline)
            for obj in objects:
                check_sink(obj, str(getattr(obj, "name", None) or type(obj).__qualname__))
                add(obj, obj.name, bool(getattr(obj, "inline", True)))
    except BaseException:
        for s in sinks:  # what was made before the error: its files closed; the error is what is said
            with contextlib.suppress(Exception):
                s.close()
        raise
    if any(getattr(s, "hosted", False) for s in sinks):
        from ..sinks.host.handle import start_host

        start_host(cfg, sinks, jsonl=jsonl, context=context, deadline=deadline)
    # `cpu_share` and `backlog` are what the threaded sinks take together: each gets an equal part,
    # so adding sinks never takes more of the interpreter from parsing, nor more of the end's wait
    threaded = [s for s in sinks if isinstance(s, ThreadedSink)]
    for s in threaded:
        s.cpu_share = cfg.cpu_share / len(threaded) if cfg.cpu_share < 1 else 1.0
        s.backlog = cfg.backlog / len(threaded)
    return sinks


def _hosted_names(cfg: SinksConfig, jsonl: object) -> tuple[str, ...]:
    """The sinks the host runs: none unless the run's JSONL is a regular file it can follow."""
    from ..sinks.host import hosted_names

    return hosted_names(cfg) if os.path.isfile(getattr(jsonl, "path", "")) else ()


def _hosted_view(name: str, label: str) -> object:
    from ..sinks.host.handle import HostedSink

    return HostedSink(label, sink_name=name)


def watch_dirs(cfg: WatchConfig, *, argv: Sequence[str], cwd: str) -> list[str]:
    """The configured directories plus the Caffe solver's snapshot directory."""
    dirs = list(cfg.dirs)
    # Only a command that names a solver can be `caffe train -solver FILE` (the reader is not
    # loaded for every other run).
    if cfg.solver_watch and any("solver" in a for a in argv):
        from ..watch.caffe_solver import snapshot_target

        target = snapshot_target(argv, cwd=cwd)
        if target is not None:
            log.info("caffe solver snapshots go to %s/%s_iter_N.*: watching it", target.directory, target.prefix)
            dirs.append(target.directory)
    return dirs


def build_watcher(cfg: WatchConfig, dirs: Sequence[str], *, cwd: str, consumer: "CheckpointConsumer",
                  iters_per_epoch: Optional[int] = None, shallow: Sequence[str] = ()) -> "CheckpointWatcher":
    """The watcher of `dirs` (from `watch_dirs`) and of `shallow` (their own files only);
    ConfigError for a bad pattern or a file in the way."""
    from ..watch.policy import parse_policy
    from ..watch.recognizers import default_recognizers

    policy = parse_policy(cfg.policy, iters_per_epoch=iters_per_epoch)
    recognizers = default_recognizers(cfg.checkpoint_patterns)
    for d in dirs:
        full = os.path.join(cwd, d)
        if os.path.exists(full) and not os.path.isdir(full):
            raise ConfigError(f"watch.dirs (--watch): {d} is not a directory")
    from ..watch.watcher import CheckpointWatcher

    return CheckpointWatcher(dirs, consumer=consumer, recognizers=recognizers, poll=cfg.poll,
                             settle=cfg.settle, policy=policy, cwd=cwd, follow_announcements=cfg.announced,
                             shallow=shallow)


def open_destinations(cfg: UploadConfig, *, run_dir: str) -> "list[tuple[str, Uploader]]":
    """Each destination of `upload.to` with its uploader, in order (empty: nothing is uploaded),
    every URL checked before any store is opened. With several, each keeps its resumable-upload
    records in a folder of its own (`uploads-<8 hex>/`, beside its journal): two stores' upload
    ids under one key would be taken for each other's."""
    from ..uploaders import open_uploader
    from ..uploaders.destinations import parse_destination
    from ..uploaders.journal import journal_name

    urls, several = cfg.destinations, len(cfg.destinations) > 1
    for url in urls:
        parse_destination(url, setting="upload.to")  # "upload.to needs a URL ...", not "unsupported"
    return [(url, open_uploader(url, credentials=cfg.credentials, state_dir=os.path.join(
        run_dir, journal_name(url, several=True).removesuffix(".sqlite")) if several else run_dir)) for url in urls]


def build_limiter(cfg: UploadConfig) -> "Optional[TokenBucket]":
    """The run's one upload rate limit (`upload.rate_limit`), None when unlimited: every manager
    of the run (every destination) is given the same bucket."""
    from ..uploaders.ratelimit import TokenBucket, parse_rate

    rate = parse_rate(cfg.rate_limit)
    return TokenBucket(rate) if rate > 0 else None


def build_managers(cfg: UploadConfig, opened: "Sequence[tuple[str, Uploader]]", **kwargs) -> "ManagerGroup":
    """One upload manager per destination (`open_destinations`), each built as `build_manager`
    builds one (its own journal file: `journal.journal_name`), all paying one rate limit; any
    whose preflight is refused fails the run before the training starts, the others closed
    (one that cannot be reached: only with `defer_unreachable`, see `build_manager`)."""
    from ..uploaders.group import ManagerGroup
    from ..uploaders.journal import journal_name

    kwargs.setdefault("limiter", build_limiter(cfg))
    several, managers = len(opened) > 1, []
    try:
        for url, uploader in opened:
            managers.append(build_manager(cfg, uploader, url=url, journal=journal_name(url, several=several),
                                          **kwargs))
    except BaseException:
        for manager in managers:
            manager.close(0.25)
        raise
    return ManagerGroup([url for url, _ in opened], managers)


def build_manager(cfg: UploadConfig, uploader: "Uploader", *, run_dir: str, run_id: str,
                  identity: Optional["NodeIdentity"] = None, values: Optional["BestByValues"] = None,
                  limiter: "Optional[TokenBucket]" = None, skip_superseded: bool = False,
                  url: Optional[str] = None, journal: Optional[str] = None,
                  defer_unreachable: bool = False) -> "UploadManager":
    """The upload manager, preflighted (a bad destination fails here, before the training starts),
    with the sets an earlier attempt left unfinished in this run directory queued again, and the
    multipart uploads it left open that nothing owns aborted. With a node (`identity`), the keys
    are `<prefix>/<run>/node-<n>/...`: nodes never overwrite each other. With retention
    (`upload.keep_last`, `keep_best`; `values` from `retention_values`), the deletions a killed
    attempt began are finished first. `limiter`: the run's bucket when several managers share it
    (default: one made from `upload.rate_limit`). `skip_superseded`: `--upload-policy last` (a
    queued set a newer one replaced is skipped). `url`: the destination among several (default:
    `upload.to`, one); `journal`: its journal's file name in `run_dir`. `defer_unreachable` (a
    run: its training must not wait on an outage): a store that cannot be reached now (a
    retryable preflight error) is said in one WARNING line and does not fail; its sets wait in
    the journal, and the sweep and the pruning with them, until it answers (startgate.py)."""
    from ..uploaders.destinations import key_prefix, run_keys
    from ..uploaders.manager import RetryPolicy, UploadManager
    from ..uploaders.retention import RetentionPolicy
    from ..uploaders.startgate import preflight_or_defer

    policy = RetentionPolicy.of(cfg.keep_last, cfg.keep_best, cfg.best_by)  # keep_best without best_by: here
    url = url or (cfg.to if isinstance(cfg.to, str) else None) or getattr(uploader, "url", "") or ""
    prefix = key_prefix(url)
    keys = run_keys(identity.folder if identity is not None else "")
    manager = UploadManager(uploader, run_dir=run_dir, run_id=run_id, prefix=prefix, key_template=keys,
                            concurrency=cfg.concurrency, delete_after_upload=cfg.delete_after_upload,
                            retention=policy, values=values,
                            limiter=limiter if limiter is not None else build_limiter(cfg),
                            skip_superseded=skip_superseded, retry=RetryPolicy(cap=cfg.retry_max_delay),
                            **({"journal_name": journal} if journal else {}))
    try:
        unreachable = preflight_or_defer(manager, url, defer=defer_unreachable)
        if unreachable is None:
            manager.sweep_orphans()  # before anything is sent: what a killed attempt left open
        else:  # the sweep and the pruning wait for the store, and every set with them
            manager.start_when_reachable(unreachable)
        # Planned from the run directory alone (no store), now, before this run's own sets are
        # queued beside the earlier attempt's; sent once the store answers.
        resumed = manager.resume()
        if unreachable is None:
            manager.prune()
    except BaseException:
        manager.close()
        raise
    if resumed:
        log.info("resuming %d checkpoint set(s) left unfinished in %s", resumed, run_dir)
    return manager


def retention_values(cfg: UploadConfig, metrics_path: str) -> "Optional[BestByValues]":
    """The --best-by metric's values (None without keep_best), seeded from the run's metrics
    file (an earlier attempt's records). A run adds it to its sinks, which close it when the log
    ends; `trainvisor resume` never closes it: a killed run's file may lack its last records, so
    a set past the last one stays undecided (kept) rather than be judged on what is missing."""
    if not (cfg.keep_best and cfg.best_by):
        return None
    from ..uploaders.retention import parse_best_by
    from ..uploaders.values import BestByValues

    values = BestByValues(parse_best_by(cfg.best_by, setting="upload.best_by"))
    values.seed(metrics_path)
    return values


def build_stop_rules(cfg: StopConfig, on_fire: "Callable[[Firing], None]") -> "Optional[StopRuleSink]":
    """The stop rules as the inline sink that calls `on_fire` once, or None when there are none."""
    if not cfg.when:
        return None
    import time

    from ..stoprules import StopRules, StopRuleSink

    return StopRuleSink(StopRules(cfg.when, now=time.monotonic(), setting="stop.when"), on_fire)
