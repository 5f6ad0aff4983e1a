"""The `trainvisor` command: a face over the library. Each command turns its options into
configuration, calls the library, prints, and maps errors to one line and an exit code.
This package is the only place that imports click."""
from __future__ import annotations

import atexit
import gc
import importlib
import logging
import os
import sys
import threading
from typing import NoReturn, Optional, Sequence

import click

from .. import __version__
from ..errors import TrainvisorError
from ..secrets import mask_text

__all__ = ["main", "console_main", "cli"]

log = logging.getLogger("trainvisor")

# name -> (module, attribute, one-line help): a command's module is imported only when that
# command runs, so `trainvisor run` pays for neither the log tools nor the upload command.
COMMANDS = {
    "run": ("run_cmd", "run", "Run COMMAND under supervision: trainvisor run [OPTIONS] -- CMD [ARGS...]."),
    "resume": ("run_cmd", "resume", "Finish the uploads a killed run left in RUN_DIR."),
    "config": ("config_cmd", "config_group", "Show the effective configuration."),
    "replay": ("log_cmds", "replay", "Parse a saved LOG through the same pipeline as a live run."),
    "parse": ("log_cmds", "parse", "Parse a saved LOG into tables (--csv) or a metric stream (--jsonl)."),
    "parsers": ("log_cmds", "parsers_command", "List the available parsers."),
    "plot": ("plot_cmd", "plot", "Draw a run's metrics (RUN_DIR, metrics.jsonl or LOG) into a PNG, SVG or PDF."),
    "fake-training": ("fake_cmd", "fake_training", "Print a saved LOG as its training did, checkpoints too (no GPU)."),
    "tail": ("tail_cmd", "tail", "Follow a training's LOGFILE beside it (a sidecar): parse, sink, watch, upload."),
    "upload": ("upload_cmd", "upload", "Upload files or directories once, verified, resumable after a crash."),
    "download": ("download_cmd", "download", "Download a checkpoint set, verified against its manifest, resumable."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> Optional[click.Command]:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in sorted(COMMANDS)])


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainvisor")
def cli() -> None:
    """Wrap a training command: pass its output through, parse metrics, back up checkpoints."""


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
    sys.excepthook = _masked_traceback
    threading.excepthook = _masked_thread_traceback
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="trainvisor", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("trainvisor: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.message = mask_text(exc.message)  # a bad value (a URL with its password) is quoted in it
        exc.show()
        sys.exit(exc.exit_code)
    except TrainvisorError as exc:
        click.echo(mask_text(f"trainvisor: {exc}"), err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            os._exit(0)
        # A path trainvisor cannot create, open or write: one line, no traceback.
        where = f": {exc.filename}" if exc.filename else ""
        log.debug("I/O error", exc_info=exc)
        click.echo(mask_text(f"trainvisor: {exc.strerror or exc}{where}"), err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


def console_main() -> NoReturn:
    """`trainvisor` as a process (the console script, `python -m trainvisor`): `main`, then the
    process ends without the interpreter's teardown. A run has loaded some 230 modules; freeing
    them one by one, after everything was written and closed, was a tenth of `trainvisor run`'s
    time (bench/startup.py). What an exit must do is done first, as the interpreter does it: the
    threads that are not daemons joined, the atexit handlers run (logging.shutdown, the log
    writer's close), stdout and stderr flushed. An exception that is no exit (a bug) leaves as
    usual, traceback and all. `main` itself stays callable in a process that goes on (tests)."""
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    _exit_now(code)


def _exit_now(code: object) -> NoReturn:
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF  # what the interpreter's exit() leaves of it
    else:  # sys.exit("message"): printed, status 1, as the interpreter does
        sys.stderr.write(f"{code}\n")
        status = 1
    shutdown = getattr(threading, "_shutdown", None)  # the interpreter's own first step of an exit
    if shutdown is None:  # another interpreter: exit as it does
        sys.exit(code)
    shutdown()  # threading's exit hooks (executors stop their idle workers), then non-daemon threads joined
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed or broken pipe: nothing left to say there
            pass
    os._exit(status)


def _masked_traceback(kind: type, exc: BaseException, tb: object) -> None:
    """A bug's traceback is still printed whole, but its text masked: an exception's message
    (a store's, a library's) may quote a URL with its password or a key."""
    import traceback

    sys.stderr.write(mask_text("".join(traceback.format_exception(kind, exc, tb))))


def _masked_thread_traceback(args: "threading.ExceptHookArgs") -> None:
    """As threading's own hook (a thread's SystemExit is silent), the traceback masked."""
    if args.exc_type is SystemExit:
        return
    name = args.thread.name if args.thread is not None else "?"
    sys.stderr.write(f"Exception in thread {name}:\n")
    _masked_traceback(args.exc_type, args.exc_value or args.exc_type(), args.exc_traceback)
