"""The `trainvisor` command: run, replay, parse, upload."""
from __future__ import annotations

import gc
import logging
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import click

from . import __version__
from .errors import ConfigError, TrainvisorError
from .lines import DEFAULT_MAX_LINE
from .parsers import ParserOptions, available_parsers
from .parsers.encoding import open_log_bytes
from .parsers.select import DEFAULT_PARSER, build_parser
from .pipeline import Pipeline
from .replay import replay_stream
from .sinks.jsonl import JsonlSink
from .sinks.stats import StatsSink
from .summary import format_summary
from .uploaders.options import UploadOptions, build_manager, upload_options
from .watch.options import WatchOptions, build_watcher, watch_options

__all__ = ["main", "cli"]

log = logging.getLogger("trainvisor")

DEFAULT_RUNS_ROOT = "trainvisor-runs"
RUN_LOG_NAME = "train.log"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def _setup_logging(run_dir: Optional[Path], *, quiet: bool):
    """trainvisor's own log: into the run directory's log (a multiprocess log writer
    that the training's Python processes can join too), warnings to stderr.
    Other libraries' loggers (watchdog, botocore, urllib3, qiniu) write to the run log only,
    never to stderr: stderr carries the training's bytes unchanged.
    Returns the writer server (or None) for the caller to close."""
    _close_library_logging()
    root = logging.getLogger("trainvisor")
    root.setLevel(logging.INFO)
    root.propagate = False
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    server = None
    if run_dir is not None:
        from .logging import LogWriterServer, MultiProcessingLogHandler

        server = LogWriterServer.start(run_dir / RUN_LOG_NAME, maxBytes=64 << 20, backupCount=10)
        own = MultiProcessingLogHandler.connect(
            server.address, formatter=logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
        root.addHandler(own)
        library = MultiProcessingLogHandler.connect(
            server.address, formatter=logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
        library.setLevel(logging.WARNING)
    else:
        library = logging.NullHandler()
    library.addFilter(_drop_watchdog_stop_race)
    library._trainvisor_library = True  # type: ignore[attr-defined]
    logging.getLogger().addHandler(library)  # so logging.lastResort never prints to stderr
    if not quiet:
        sh = logging.StreamHandler(sys.stderr)
        sh.setLevel(logging.WARNING)
        sh.setFormatter(logging.Formatter("trainvisor: %(message)s"))
        root.addHandler(sh)
    if not root.handlers:
        root.addHandler(logging.NullHandler())  # quiet and no run log: nothing, not logging's last resort
    return server


def _drop_watchdog_stop_race(record: logging.LogRecord) -> bool:
    """watchdog logs an ERROR when an inotify emitter is stopped while an event arrives
    (trainvisor stops one whenever a watched directory appears and its parent's watch is
    replaced); nothing is lost, so it is not worth an error line in the run log."""
    return not (record.name.startswith("watchdog") and "called when the thread is inactive" in str(record.msg))


def _close_library_logging() -> None:
    top = logging.getLogger()
    for h in list(top.handlers):
        if getattr(h, "_trainvisor_library", False):
            top.removeHandler(h)
            h.close()


def _close_logging(server) -> None:
    _close_library_logging()
    root = logging.getLogger("trainvisor")
    for h in list(root.handlers):
        root.removeHandler(h)
        h.close()
    if server is not None:
        server.close()


def _parser_options(year: Optional[int], iters_per_epoch: Optional[int], argv: Sequence[str] = ()) -> ParserOptions:
    return ParserOptions(year=year, iters_per_epoch=iters_per_epoch, argv=tuple(argv))


def _positive(ctx, param, value):
    if value is not None and value <= 0:
        raise click.BadParameter("must be greater than 0")
    return value


parser_option = click.option(
    "--parser", "parser_name", default=DEFAULT_PARSER, show_default=True, metavar="NAME|auto",
    help="Log format parser (see `trainvisor parsers`); auto chooses from the command and the first lines.",
)
rules_option = click.option(
    "--rules", "rules_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
    help="YAML or TOML file of regex rules that add to (or replace) the parser; see docs/parsers.md.",
)
year_option = click.option(
    "--year", type=int, default=None,
    help="Year of the log's first timestamp (glog lines carry none). Default: now for run, the file's mtime for replay.",
)
ipe_option = click.option(
    "--iters-per-epoch", type=int, default=None, callback=_positive,
    help="Iterations per epoch, for formats that only count iterations (Caffe).",
)
max_line_option = click.option(
    "--max-line-bytes", type=int, default=DEFAULT_MAX_LINE, show_default=True, callback=_positive,
    help="Longer lines are cut (and flagged) for parsing; the bytes still pass through whole.",
)


def parsing_options(f):
    """The options every command that parses takes (run, replay, parse)."""
    for option in (max_line_option, ipe_option, year_option, rules_option, parser_option):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainvisor")
def cli() -> None:
    """Wrap a training command: pass its output through, parse metrics, back up checkpoints."""


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@parsing_options
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), default=None,
              help="JSONL metrics file. Default: RUN_DIR/metrics.jsonl.")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help=f"Run directory. Default: ./{DEFAULT_RUNS_ROOT}/RUN_ID.")
@click.option("--run-id", default=None, help="Run id (default: time + random suffix).")
@click.option("--log-file", type=click.Path(dir_okay=False), default=None,
              help="Also write the child's output, both streams as received, to this file.")
@click.option("--shell", is_flag=True, help="Run CMD through /bin/sh -c.")
@click.option("--cwd", type=click.Path(file_okay=False, exists=True), default=None, help="Child's working directory.")
@click.option("--kill-timeout", type=float, default=30.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL of the whole process tree at shutdown.")
@click.option("--summary/--no-summary", default=None, help="Print a summary at the end (default: when stderr is a terminal).")
@click.option("-q", "--quiet", is_flag=True, help="No trainvisor warnings on stderr (they still go to the run log).")
@watch_options
@upload_options
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def run(parser_name, rules_path, year, iters_per_epoch, max_line_bytes, metrics_path, run_dir, run_id, log_file, shell, cwd,
        kill_timeout, summary, quiet, command, watch_opts: WatchOptions, upload_opts: UploadOptions) -> None:
    """Run COMMAND under supervision: `trainvisor run [OPTIONS] -- CMD [ARGS...]`."""
    command = list(command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise ConfigError("no command given: trainvisor run [OPTIONS] -- CMD [ARGS...]")
    run_id = run_id or new_run_id()
    rd = Path(run_dir) if run_dir else Path(DEFAULT_RUNS_ROOT) / run_id
    rd.mkdir(parents=True, exist_ok=True)
    log_server = _setup_logging(rd, quiet=quiet)
    try:
        exit_code = _run(parser_name, rules_path, year, iters_per_epoch, max_line_bytes, metrics_path, rd, run_id, log_file,
                         shell, cwd, kill_timeout, summary, command, log_server, watch_opts, upload_opts)
    finally:
        _close_logging(log_server)
    sys.exit(exit_code)


def _run(parser_name, rules_path, year, iters_per_epoch, max_line_bytes, metrics_path, rd, run_id, log_file, shell, cwd,
         kill_timeout, summary, command, log_server, watch_opts: WatchOptions, upload_opts: UploadOptions) -> int:
    from .supervisor import Supervisor
    from .watch.record import CheckpointRecord, FanOut

    parser = build_parser(parser_name, _parser_options(year or time.localtime().tm_year, iters_per_epoch, command),
                          rules=rules_path)
    metrics = Path(metrics_path) if metrics_path else rd / "metrics.jsonl"
    sink = JsonlSink(metrics)
    if summary is None:
        summary = sys.stderr.isatty()
    counts = StatsSink()
    sinks = [sink, counts] if summary else [sink]
    # Checkpoint watching and uploading: set up, preflighted, and config errors
    # raised before the training starts, not ten hours into it.
    manager = build_manager(upload_opts, run_dir=str(rd), run_id=run_id)
    consumers = [CheckpointRecord(rd / "checkpoints.jsonl")] + ([manager] if manager is not None else [])
    try:
        watcher = build_watcher(watch_opts, argv=command, cwd=os.path.abspath(cwd or os.getcwd()),
                                consumer=FanOut(consumers), iters_per_epoch=iters_per_epoch)
    except BaseException:
        if manager is not None:
            manager.close()
        raise
    if watcher is not None:
        sinks.append(watcher.announcement_sink())
        log.info("watching %s for checkpoints", ", ".join(watcher.roots))
    elif manager is not None:
        log.warning("--upload-to %s: no directory to watch (give --watch DIR), nothing will be uploaded",
                    upload_opts.upload_to)
    log.info("run %s: %s (parser %s, metrics %s)", run_id, " ".join(command), parser_name, metrics)
    sup = Supervisor(
        command, parser=parser, sinks=sinks, shell=shell, cwd=cwd,
        log_file=log_file, kill_timeout=kill_timeout, max_line=max_line_bytes, subreaper=True,
        # The training's own Python processes can log into the run log: trainvisor.logging.attach()
        extra_env=log_server.env if log_server is not None else None,
    )
    if watcher is not None:
        watcher.start()
    try:
        result = sup.run()
    finally:
        if watcher is not None:
            watcher.stop(drain=True)
        if manager is not None:
            _drain_uploads(manager, upload_opts)
    log.info("run %s ended: exit code %d, %d lines, %d events", run_id, result.exit_code,
             result.stats.lines, result.stats.events)
    if summary:
        click.echo(format_summary(result.stats, counts, exit_code=result.exit_code, faults=result.faults,
                                  metrics_path=str(metrics), run_dir=str(rd)), err=True)
    return result.exit_code


def _drain_uploads(manager, opts: UploadOptions) -> None:
    try:
        report = manager.drain(opts.drain_timeout)
    finally:
        manager.close()
    if report.pending or report.failed:
        for key in report.pending:
            log.warning("upload not finished within --drain-timeout %gs: %s", opts.drain_timeout, key)
        for key in report.failed:
            log.error("upload failed for good: %s (see the run log)", key)
    else:
        log.info("all checkpoint uploads verified")


def _open_log(path: str):
    try:
        return open(path, "rb")
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc


def _file_year(path: str) -> int:
    return time.localtime(os.stat(path).st_mtime).tm_year


@cli.command()
@parsing_options
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), default=None,
              help="Write JSONL here (default: standard output).")
@click.option("--summary/--no-summary", default=False, help="Print a summary to stderr at the end.")
@click.argument("log_path", metavar="LOG", type=click.Path(dir_okay=False))
def replay(parser_name, rules_path, year, iters_per_epoch, max_line_bytes, metrics_path, summary, log_path) -> None:
    """Parse a saved LOG through the same pipeline as a live run."""
    with _open_log(log_path) as fh:
        parser = build_parser(parser_name, _parser_options(year or _file_year(log_path), iters_per_epoch),
                              rules=rules_path)
        sink = JsonlSink(metrics_path if metrics_path else sys.stdout)
        counts = StatsSink()
        stats = replay_stream(open_log_bytes(fh), Pipeline(parser, sinks=[sink, counts] if summary else [sink]), max_line=max_line_bytes)
    if summary:
        click.echo(format_summary(stats, counts, metrics_path=metrics_path or "-"), err=True)


@cli.command()
@parsing_options
@click.option("--jsonl", "jsonl", is_flag=True, help="Print the metric stream as JSON lines on standard output.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False), default=None,
              help="Write LOG.train and LOG.test here, in Caffe parse_log.py's layout.")
@click.argument("log_path", metavar="LOG", type=click.Path(dir_okay=False))
def parse(parser_name, rules_path, year, iters_per_epoch, max_line_bytes, jsonl, csv_dir, log_path) -> None:
    """Parse a saved LOG into tables (--csv) or a metric stream (--jsonl)."""
    from .sinks.caffe_csv import CaffeCsvSink

    if csv_dir is None and not jsonl:
        raise ConfigError("nothing to write: give --jsonl or --csv OUTDIR")
    with _open_log(log_path) as fh:
        parser = build_parser(parser_name, _parser_options(year or _file_year(log_path), iters_per_epoch),
                              rules=rules_path)
        sinks = [JsonlSink(sys.stdout)] if jsonl else []
        if csv_dir is not None:
            sink = CaffeCsvSink(csv_dir, os.path.basename(log_path))
            sinks.append(sink)
        replay_stream(open_log_bytes(fh), Pipeline(parser, sinks=sinks), max_line=max_line_bytes)
    if csv_dir is None:
        return
    for path in sink.written:
        click.echo(f"wrote {path}", err=True)
    if not sink.written:
        click.echo(f"trainvisor: no Caffe metrics found in {log_path}; nothing written", err=True)


@cli.command("parsers")
def parsers_command() -> None:
    """List the available parsers with a one-line description each."""
    for name, description in available_parsers():
        click.echo(f"{name:<12} {description}")


def _register_upload() -> None:
    from .upload_command import upload

    cli.add_command(upload)


_register_upload()


def _tune_gc() -> None:
    """The hot path allocates a tuple per metric and a list per table row, none of
    them in reference cycles; with the default gen-0 threshold (700) the cyclic
    collector walks them about 2,000 times per million lines, ~15% of `parse`'s
    time (bench/parse_throughput.py). Collect less often, and leave the objects
    of start-up out of every collection."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Entry point: maps trainvisor errors to one line on stderr and an exit code."""
    _tune_gc()
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="trainvisor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("trainvisor: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except TrainvisorError as exc:
        click.echo(f"trainvisor: {exc}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            os._exit(0)
        # A path trainvisor cannot create, open or write: one line, no traceback.
        where = f": {exc.filename}" if exc.filename else ""
        log.debug("I/O error", exc_info=exc)
        click.echo(f"trainvisor: {exc.strerror or exc}{where}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
