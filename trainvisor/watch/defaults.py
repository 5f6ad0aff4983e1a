"""Where frameworks put checkpoints when nobody says where: the directories a run with a
destination and no watched directory watches, so a checkpoint the log never announces (Lightning's
default `ModelCheckpoint`, a Keras `ModelCheckpoint` without `verbose=1`, a plain `torch.save`)
is still uploaded. A pure rule: the training's argv and working directory in, directories out.

Each default is a directory the training owns, watched with its subdirectories:
- ``lightning_logs``: Lightning's default logger puts `ModelCheckpoint`'s files in
  ``lightning_logs/version_N/checkpoints`` (N unknown before the run: the whole folder is watched;
  it holds logs and hyperparameters besides, a handful of small files);
- ``checkpoints``: Lightning without a logger (``default_root_dir/checkpoints``), and the name most
  training scripts use;
- ``trainer_output``: the Hugging Face Trainer's ``output_dir`` when none is given;
- a directory the command line names as an output: ``--output_dir X`` / ``--output-dir X`` /
  ``output_dir=X`` (the Trainer's ``HfArgumentParser`` flags and key=value configs), Lightning CLI's
  ``--trainer.default_root_dir X``, and the common ``--checkpoint_dir`` / ``--ckpt_dir`` forms.

The working directory itself is watched *shallow*: its own files only (``model.pt`` from the PyTorch
examples' ``torch.save``, ``best_model.keras`` from the Keras examples' `ModelCheckpoint`). Never
with its subdirectories: a dataset often lives there (``./data``), and a recursive watch would walk
it at start and end and wake the watcher on every file the data loader opens. One watch on one
directory costs the same whatever lies below it.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Sequence

from .announced import too_wide

__all__ = ["DefaultLocations", "default_locations", "FIXED_DIRS", "OUTPUT_ARGS"]

FIXED_DIRS = ("lightning_logs", "checkpoints", "trainer_output")
OUTPUT_ARGS = frozenset({"output_dir", "output-dir", "trainer.default_root_dir", "default_root_dir",
                         "checkpoint_dir", "checkpoint-dir", "ckpt_dir", "ckpt-dir"})


@dataclass(frozen=True)
class DefaultLocations:
    """Absolute directories: `recursive` are watched with their subdirectories (they may not exist
    yet), `shallow` for their own files only (the working directory)."""

    recursive: tuple[str, ...]
    shallow: tuple[str, ...]

    def describe(self) -> str:
        """For the run log: which directories, and how."""
        parts = [f"{d} (with subdirectories)" for d in self.recursive]
        parts += [f"{d} (its own files only)" for d in self.shallow]
        return ", ".join(parts)


def output_dirs(argv: Sequence[str]) -> list[str]:
    """The directories `argv` names with one of `OUTPUT_ARGS`, as written, in order."""
    found = []
    for i, arg in enumerate(argv):
        name, eq, value = arg.lstrip("-+").partition("=")
        if eq and name in OUTPUT_ARGS:
            found.append(value)
        elif not eq and arg.startswith("--") and name in OUTPUT_ARGS and i + 1 < len(argv):
            found.append(argv[i + 1])
    # A URL (gs://...) is not local; a flag after a flag name is that flag's missing value.
    return [d for d in found if d and "://" not in d and not d.startswith("-")]


def default_locations(argv: Sequence[str], *, cwd: str, home: str, shell: bool = False) -> DefaultLocations:
    """The default checkpoint locations of a training started with `argv` in `cwd` (`shell`: argv
    is a shell command line, its words read as the shell would split them). A named directory that
    holds the working directory (``--output_dir .``, an ancestor, the home directory) is not
    watched with its subdirectories: the working directory is watched shallow anyway."""
    if shell:
        try:
            argv = shlex.split(" ".join(argv))
        except ValueError:  # unbalanced quotes: the shell will say so; no names from it
            argv = ()
    recursive: list[str] = []
    for d in (*FIXED_DIRS, *output_dirs(argv)):
        if d == "~" or d.startswith("~/"):
            d = home + d[1:]
        full = os.path.normpath(os.path.join(cwd, d))
        if full not in recursive and not too_wide(full, cwd, home):
            recursive.append(full)
    return DefaultLocations(tuple(recursive), (os.path.normpath(cwd),))
