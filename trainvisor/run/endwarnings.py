"""What a run must not end on in silence: a destination that received nothing, an output that
gave no metric. Each is a warning with its remedy, in the run log, on stderr (unless quiet) and
in the summary; a run that did what it was asked for says nothing here.

A pure rule over what the run counted, so the wording is tested without running anything."""
from __future__ import annotations

from typing import Optional, Sequence

__all__ = ["end_warnings", "no_checkpoint_warning", "no_metrics_warning"]


def no_checkpoint_warning(destination: str, watched: Sequence[str]) -> str:
    where = ", ".join(watched) if watched else "no directory"
    return (f"upload.to {destination}: no checkpoint was found, nothing was uploaded (watched: {where}); "
            f"if the training saved checkpoints, give their directory with --watch DIR")


def no_metrics_warning(lines: int, parser: str) -> str:
    return (f"no metrics parsed from {lines} lines of output (parser {parser}): choose the log format with "
            f"--parser NAME (`trainvisor parsers` lists them) or give --rules FILE")


def end_warnings(*, destination: Optional[str], checkpoints_found: int, watched: Sequence[str],
                 lines: int, metrics: int, parser: str) -> tuple[str, ...]:
    """The warnings a finished run ends with (none when it found what it looked for).
    `destination`: upload.to, None when nothing is uploaded; `checkpoints_found`: the complete
    checkpoints the watcher handed over; `watched`: its directories at the end."""
    out = []
    if destination and checkpoints_found == 0:
        out.append(no_checkpoint_warning(destination, watched))
    if lines > 0 and metrics == 0:
        out.append(no_metrics_warning(lines, parser))
    return tuple(out)
