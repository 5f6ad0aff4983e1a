"""`trainvisor run` (and `resume`): flags and a config file in, a `RunConfig` out, handed to the
library; the summary printed. `trainvisor config show` (config_cmd.py) reads the same flags
through `effective_config`."""
from __future__ import annotations

import sys
from typing import Any, Optional

import click

from ..config import RunConfig
from ..config.files import load_layers
from .flags import RUN_FLAGS, config_option, overrides, with_flags
from .sink_flags import apply_sink_shortcuts, with_sink_shortcuts

__all__ = ["run", "resume", "effective_config"]

# An unknown option before the command is an error (click's own, exit 2), never taken as the
# command; everything after the first positional argument (or `--`) belongs to the command.
_COMMAND_SETTINGS = {"allow_interspersed_args": False}


def effective_config(ctx: click.Context, config_path: Optional[str], flag_values: dict[str, Any],
                     command: tuple[str, ...], shortcut_values: Optional[dict] = None) -> RunConfig:
    """defaults < config file (or $TRAINVISOR_CONFIG) < TRAINVISOR__* variables < flags < command;
    then the sink shortcuts (`--tensorboard DIR`) add their sinks to what that says."""
    layer = overrides(ctx, RUN_FLAGS, flag_values)
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if argv:
        layer.set(("command",), argv, "the command line")
    return apply_sink_shortcuts(load_layers(RunConfig, config_path, layer), shortcut_values or {})


@click.command(context_settings=_COMMAND_SETTINGS)
@config_option
@with_flags(RUN_FLAGS)
@with_sink_shortcuts
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run(config_path: Optional[str], flag_values: dict[str, Any], shortcut_values: dict, command: tuple[str, ...]) -> None:
    """Run COMMAND under supervision: `trainvisor run [OPTIONS] -- CMD [ARGS...]`.

    The command may also come from the config file (`command: [...]`)."""
    from ..run import Run

    config = effective_config(click.get_current_context(), config_path, flag_values, command, shortcut_values)
    if not config.command:
        raise click.UsageError("no command given: trainvisor run [OPTIONS] -- CMD [ARGS...] (or `command:` in --config)")
    summary = Run(config).run()
    if config.logging.summary or (config.logging.summary is None and sys.stderr.isatty()):
        from ..summary import format_summary  # only when the summary is shown

        click.echo(format_summary(summary), err=True)
    sys.exit(summary.exit_code)


@click.command("resume")
@click.argument("run_dir", metavar="RUN_DIR", type=click.Path(file_okay=False, exists=True))
@click.option("--drain-timeout", type=float, default=None, metavar="SECONDS",
              help="Wait this long for the uploads (default: the run's own upload.drain_timeout).")
@click.option("--credentials", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Credentials file (KEY=value lines) instead of the run's own upload.credentials.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr (they still go to the run log).")
@click.option("--rebuild-journal", is_flag=True,
              help="Set the upload journal aside (kept, renamed) and rebuild it from checkpoints.jsonl, "
                   "the files and the store: for a journal reported damaged or another run's.")
def resume(run_dir: str, drain_timeout: Optional[float], credentials: Optional[str], quiet: bool,
           rebuild_journal: bool) -> None:
    """Finish what a killed run left in RUN_DIR: its pending uploads, deletions and manifests."""
    from pathlib import Path

    from ..config.settings import finite_non_negative
    from ..errors import ConfigError
    from ..run.resume import resume_destinations

    problem = finite_non_negative(drain_timeout)
    if problem:
        raise ConfigError(f"--drain-timeout: {problem} (got {drain_timeout!r})")
    every = resume_destinations(Path(run_dir), drain_timeout=drain_timeout, quiet=quiet, credentials=credentials,
                                rebuild_journal=rebuild_journal)
    if not every:
        click.echo(f"trainvisor: {run_dir} uploads nowhere; nothing to resume", err=True)
        return
    for totals in every:  # one line per destination; any left unfinished is the exit status
        click.echo(f"uploads to {totals.destination}: {totals.sets_verified} checkpoint sets verified, "
                   f"{totals.sets_pending} pending, {totals.sets_failed} failed", err=True)
    if not all(totals.complete for totals in every):
        sys.exit(3)
