"""`trainvisor tail LOGFILE`: the sidecar. A run whose source is a log file that a training writes
beside it (started by someone else: a scheduler, a notebook), with `run`'s flags for parsing,
sinks, checkpoints and uploads (not the process flags: there is no child)."""
from __future__ import annotations

import signal
import sys
from typing import Any, Optional

import click

from ..config import RunConfig
from ..config.files import load_layers
from .flags import RUN_FLAGS, config_option, overrides, with_flags
from .sink_flags import apply_sink_shortcuts, with_sink_shortcuts

__all__ = ["tail", "TAIL_FLAGS"]

TAIL_FLAGS = tuple(f for f in RUN_FLAGS if f.key[0] != "process")


@click.command("tail")
@config_option
@click.option("--pid", type=int, default=None, metavar="PID",
              help="End when process PID exits (after reading what its log holds then).")
@click.option("--until-exit-of", "until_exit_of", default=None, metavar="NAME",
              help="End when no process named NAME (its name, program or script) runs any more.")
@click.option("--poll-file", is_flag=True, help="Look at the log every 50 ms instead of waiting on inotify.")
@with_flags(TAIL_FLAGS)
@with_sink_shortcuts
@click.argument("logfile", metavar="LOGFILE", type=click.Path(dir_okay=False))
def tail(config_path: Optional[str], pid: Optional[int], until_exit_of: Optional[str], poll_file: bool,
         flag_values: dict[str, Any], shortcut_values: dict, logfile: str) -> None:
    """Follow LOGFILE as a training writes it: parse, sink, watch and upload as `run` does.

    Waits for the file to appear, follows rotation (rename, copytruncate) and truncation, and
    keeps its position in the run directory: started again on the same --run-dir, it goes on
    where it stopped, each metric reported once. Ends at --pid / --until-exit-of's exit, or on
    SIGINT/SIGTERM (after reading what the file holds)."""
    from ..run.sidecar import TailRun
    from ..summary import format_summary

    if pid is not None and until_exit_of is not None:
        raise click.UsageError("--pid and --until-exit-of: give one")
    config = load_layers(RunConfig, config_path, overrides(click.get_current_context(), TAIL_FLAGS, flag_values))
    config = apply_sink_shortcuts(config, shortcut_values)
    run = TailRun(config, logfile, pid=pid, until_exit_of=until_exit_of, inotify=not poll_file)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: run.stop_following())
    summary = run.tail()
    if config.logging.summary or (config.logging.summary is None and sys.stderr.isatty()):
        click.echo(format_summary(summary), err=True)
    sys.exit(summary.exit_code)
