"""The `trainvisor` command: a face over the library. Each command turns its options into
configuration, calls the library, prints, and maps errors to one line and an exit code.
This package is the only place that imports click."""
from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Optional, Sequence

import click

from .. import __version__
from ..errors import TrainvisorError
from .log_cmds import parse, parsers_command, replay
from .run_cmd import config_group, run
from .upload_cmd import upload

__all__ = ["main", "cli"]

log = logging.getLogger("trainvisor")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="trainvisor")
def cli() -> None:
    """Wrap a training command: pass its output through, parse metrics, back up checkpoints."""


for _command in (run, replay, parse, parsers_command, upload, config_group):
    cli.add_command(_command)


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
