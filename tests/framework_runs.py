"""Running a real training program under `trainvisor run`, and reading what each side recorded:
trainvisor's metrics.jsonl and the --log-file it saved, Lightning's own metrics.csv."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

from trainvisor.events import Metric

from .conftest import FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
PROGRAMS = FIXTURES / "programs"


class LiveRun(NamedTuple):
    """One supervised run: the records trainvisor wrote live and the log it saved beside them."""

    metrics: list
    log: Path
    workdir: Path


def run_program(workdir: Path, program: str, *args: str, flags: tuple = (), env: Optional[dict] = None) -> LiveRun:
    """`trainvisor run` (auto parser) of fixtures/programs/`program` in `workdir`; fails on a bad exit.
    `env`: variables set for trainvisor and the child (None: removed), over this environment."""
    environ = None
    if env:
        environ = {k: v for k, v in os.environ.items() if k not in env}
        environ.update({k: v for k, v in env.items() if v is not None})
    proc = subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", "r", "--log-file", "out.log", *flags, "--",
                                        sys.executable, str(PROGRAMS / program), *args],
                          cwd=workdir, capture_output=True, text=True, timeout=300, env=environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = (workdir / "r" / "metrics.jsonl").read_text().splitlines()
    metrics = [Metric.from_json_dict(d) for d in map(json.loads, lines) if "event" not in d]
    return LiveRun(metrics, workdir / "out.log", workdir)


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
