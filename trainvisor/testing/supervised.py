"""`supervised_run(argv)`: a training under trainvisor in one call, for tests: its summary, what
it printed, and its events.

In this process (the default) it goes through `Run`, as a Python caller uses it: the
`RunSummary` comes back typed and the events are the sinks' own records. With `in_process=False`
it runs `trainvisor run` as a user does: the events are read back from the run's metrics file
and the summary from the run directory's summary.json (None when the run did not finish: a
run killed, or refused before it started)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Optional, Sequence

from ..events import Event
from .replaying import Records

if TYPE_CHECKING:
    from ..run.summary import RunSummary

__all__ = ["SupervisedRun", "supervised_run"]


@dataclass(frozen=True)
class SupervisedRun(Records):
    """`stdout`/`stderr`: the bytes trainvisor passed through (its own warnings in `stderr` when
    run as a subprocess; in-process they go to this process's stderr)."""

    exit_code: int
    stdout: bytes
    stderr: bytes
    events: tuple[Event, ...]
    run_dir: Path
    summary: Optional["RunSummary"] = None


def supervised_run(argv: Sequence[str], run_dir: "str | os.PathLike[str]", *, in_process: bool = True,
                   cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None, year: Optional[int] = None,
                   parser: str = "auto", flags: Sequence[str] = (), timeout: float = 300.0) -> SupervisedRun:
    """Run `argv` under trainvisor with its run directory at `run_dir`. `env`: added to the
    child's environment; `flags`: more `trainvisor run` flags (`in_process=False` only)."""
    if not in_process:
        return _as_command(argv, Path(run_dir), cwd=cwd, env=env, year=year, parser=parser, flags=flags,
                           timeout=timeout)
    if flags:
        raise ValueError("flags are `trainvisor run`'s: give them with in_process=False")
    return _in_process(argv, Path(run_dir), cwd=cwd, env=env, year=year, parser=parser)


def _in_process(argv: Sequence[str], run_dir: Path, *, cwd: Optional[str], env: Optional[Mapping[str, str]],
                year: Optional[int], parser: str) -> SupervisedRun:
    from ..calls.logs import Collected
    from ..config import RunConfig
    from ..config.schema import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig
    from ..run import Run

    config = RunConfig(command=tuple(argv), run=RunDirConfig(dir=str(run_dir)),
                       parsing=ParsingConfig(parser=parser, year=year),
                       process=ProcessConfig(cwd=cwd, env=dict(env or {})), logging=LoggingConfig(summary=True))  # the whole RunSummary (its table too); Run prints nothing
    collect = Collected()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        summary = Run(config, sinks=[collect], stdout_fd=out.fileno(), stderr_fd=err.fileno()).run()
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    return SupervisedRun(summary.exit_code, stdout, stderr, tuple(collect.events), run_dir, summary)


def _as_command(argv: Sequence[str], run_dir: Path, *, cwd: Optional[str], env: Optional[Mapping[str, str]],
                year: Optional[int], parser: str, flags: Sequence[str], timeout: float) -> SupervisedRun:
    from .golden import events_from_jsonl

    from ..run.summaryfile import SUMMARY_NAME, read_summary

    metrics = run_dir.parent / f"{run_dir.name}.metrics.jsonl"
    cmd = [sys.executable, "-m", "trainvisor", "run", "--run-dir", str(run_dir), "--metrics", str(metrics),
           "--parser", parser, *(["--year", str(year)] if year is not None else []), *flags, "--", *argv]
    proc = subprocess.run(cmd, capture_output=True, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout)
    events = events_from_jsonl(metrics) if metrics.exists() else ()
    summary = read_summary(run_dir) if (run_dir / SUMMARY_NAME).exists() else None
    return SupervisedRun(proc.returncode, proc.stdout, proc.stderr, events, run_dir, summary)
