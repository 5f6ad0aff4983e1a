"""`trainvisor config show`: the configuration `trainvisor run` would use with these flags,
printed (secrets masked). A module of its own: its ~50 flags are click options made when the
module loads, which a `trainvisor run` does not pay for (bench/startup.py)."""
from __future__ import annotations

from typing import Any, Optional

import click

from .flags import RUN_FLAGS, config_option, with_flags
from .run_cmd import _COMMAND_SETTINGS, effective_config
from .sink_flags import with_sink_shortcuts

__all__ = ["config_group"]


@click.group("config")
def config_group() -> None:
    """Show the effective configuration."""


@config_group.command("show", context_settings=_COMMAND_SETTINGS)
@config_option
@click.option("--format", "fmt", type=click.Choice(["yaml", "toml"]), default="yaml", show_default=True,
              help="Output format; either is read back by --config.")
@with_flags(RUN_FLAGS)
@with_sink_shortcuts
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def show(config_path: Optional[str], fmt: str, flag_values: dict[str, Any], shortcut_values: dict,
         command: tuple[str, ...]) -> None:
    """Print the configuration `trainvisor run` would use with these options (secrets masked)."""
    from ..config.dump import dump

    config = effective_config(click.get_current_context(), config_path, flag_values, command, shortcut_values)
    click.echo(dump(config, fmt), nl=False)
