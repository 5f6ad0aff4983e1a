"""`trainvisor fake-training LOG`: a training without a GPU. Prints a saved log as the program
that wrote it did, writes the checkpoints it announces, meets Ctrl-C as that framework does.

    trainvisor run -- trainvisor fake-training caffe.log --rate 200
"""
from __future__ import annotations

import sys
from typing import Optional

import click

__all__ = ["fake_training"]


@click.command("fake-training")
@click.argument("log_path", metavar="LOG", type=click.Path(dir_okay=False))
@click.option("--rate", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="Lines per second (0: as fast as the reader takes them).")
@click.option("--framework", default=None, metavar="NAME",
              help="Play this framework (a parser name: caffe, keras, ...); default: the one `auto` picks for LOG.")
@click.option("--stream", type=click.Choice(["stdout", "stderr"]), default=None,
              help="Write the log here (default: the stream the framework logs its metrics to).")
@click.option("--snapshots/--no-snapshots", default=True, show_default=True,
              help="Write the checkpoint files the log announces.")
@click.option("--snapshot-dir", type=click.Path(file_okay=False), default=".", show_default=True,
              help="Where announced relative paths are rooted (absolute ones are re-rooted here).")
@click.option("--snapshot-size", type=click.IntRange(min=0), default=1024, show_default=True,
              help="Bytes per checkpoint file.")
@click.option("--exit-code", type=click.IntRange(0, 255), default=0, show_default=True)
@click.option("--die-by-signal", default=None, metavar="SIG", help="Die of this signal at the end (KILL, SEGV, ...).")
@click.option("--linger", type=click.FloatRange(min=0), default=0.0,
              help="Seconds to stay alive after the last line (a signal may still come).")
def fake_training(log_path: str, rate: float, framework: Optional[str], stream: Optional[str], snapshots: bool,
                  snapshot_dir: str, snapshot_size: int, exit_code: int, die_by_signal: Optional[str],
                  linger: float) -> None:
    """Replay LOG as a training would print it: for demos and for trying trainvisor without a GPU."""
    import signal

    from ..errors import ConfigError
    from ..testing.faketrain import FakeOptions, run_fake

    if die_by_signal and not hasattr(signal, "SIG" + die_by_signal.upper().removeprefix("SIG")):
        raise ConfigError(f"--die-by-signal: no signal named {die_by_signal!r}")
    sys.exit(run_fake(FakeOptions(log_path, rate=rate, framework=framework, stream=stream, snapshots=snapshots,
                                  snapshot_dir=snapshot_dir, snapshot_size=snapshot_size, exit_code=exit_code,
                                  die_by_signal=die_by_signal, linger=linger)))
