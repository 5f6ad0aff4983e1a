"""Running a real training program under `trainvisor run`, and reading what each side recorded:
trainvisor's metrics.jsonl (its metrics and notices) and the --log-file it saved, Lightning's own
metrics.csv.

What a program prints depends on its terminal as the program reads it from the environment
(Rich reads COLUMNS, LINES, TERM, NO_COLOR, FORCE_COLOR, TTY_COMPATIBLE, TTY_INTERACTIVE): every
run sets them, never inherits them, and reads no terminal of the test's (stdin is closed), so
`--pty` gets trainvisor's fixed window."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from trainvisor.events import Metric, Notice

from .conftest import FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
PROGRAMS = FIXTURES / "programs"


# What the terminal a program prints for is read from (rich, tqdm, click, colour conventions).
TERMINAL_VARIABLES = ("COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE",
                      "CLICOLOR", "CLICOLOR_FORCE", "COLORTERM")


class LiveRun(NamedTuple):
    """One supervised run: the records trainvisor wrote live, the log it saved beside them, and
    the child's stdout as trainvisor passed it through (bytes: the lines `Metric.line` counts)."""

    metrics: list
    log: Path
    workdir: Path
    notices: list = []
    stdout: bytes = b""


def program_env(columns: int) -> dict:
    """This process's environment with the terminal a program sees set, not inherited: `columns`
    wide, an xterm (what a pipe or trainvisor's `--pty` shows then depends on nothing else)."""
    env = {k: v for k, v in os.environ.items() if k not in TERMINAL_VARIABLES}
    env.update(COLUMNS=str(columns), LINES="50", TERM="xterm-256color")
    return env


def run_program(workdir: Path, program: str, *args: str, flags: tuple = (), columns: int = 80,
                env: Optional[dict] = None) -> LiveRun:
    """`trainvisor run` (auto parser) of fixtures/programs/`program` in `workdir`, on a console of
    `columns` columns; fails on a bad exit. `env`: variables set for trainvisor and the child
    (None: removed), over that environment."""
    environ = program_env(columns)
    for key, value in (env or {}).items():
        environ.pop(key, None)
        if value is not None:
            environ[key] = value
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--log-file", "out.log", *flags, "--",
                                        sys.executable, str(PROGRAMS / program), *args],
                          cwd=workdir, capture_output=True, stdin=subprocess.DEVNULL, env=environ, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode("utf-8", "replace")[-3000:]
    records = [json.loads(line) for line in (workdir / "r" / "metrics.jsonl").read_text().splitlines()]
    metrics = [Metric.from_json_dict(d) for d in records if "event" not in d]
    notices = [Notice(d["code"], d["message"], d["line"], d["wall_time"], d["stream"])
               for d in records if d.get("event") == "notice"]
    return LiveRun(metrics, workdir / "out.log", workdir, notices, proc.stdout)


def printed(value: str) -> float:
    """A metrics.csv value as Lightning's progress bar prints it (3 decimals)."""
    return float(f"{float(value):.3f}")


def lightning_csv(log_dir: Path) -> list[dict]:
    """The rows of the metrics.csv Lightning's CSVLogger wrote under `log_dir`."""
    (path,) = log_dir.rglob("metrics.csv")
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def csv_rows(rows: list[dict], columns: dict) -> set:
    """(name, phase, epoch, step, value as printed) for each filled cell of `columns`
    (metrics.csv column -> (trainvisor's name, phase))."""
    return {(*columns[col], float(row["epoch"]), int(row["step"]), printed(row[col]))
            for row in rows for col in columns if row.get(col)}


def epoch_rows(metrics) -> set:
    """(name, phase, epoch, step, value) of the records that are not running values."""
    return {(m.name, m.phase, m.epoch, m.iteration, m.value) for m in metrics if not m.running}


def printed_lines(run: LiveRun) -> list[str]:
    """The child's stdout as physical lines (``\\n``), as `Metric.line` counts them (1-based)."""
    return run.stdout.decode("utf-8", "replace").split("\n")
