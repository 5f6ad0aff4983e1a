"""summary.json: a finished run's RunSummary kept in its run directory and read back equal to the
one the Run returned (NaN kept, nested records typed); a missing or damaged one is one line."""
from __future__ import annotations

import math
import sys

import pytest

from trainvisor import Run, RunConfig
from trainvisor.config import LoggingConfig, ParsingConfig, RunDirConfig, StopConfig, UploadConfig, WatchConfig
from trainvisor.errors import ConfigError
from trainvisor.run.summaryfile import SUMMARY_NAME, read_summary

from .conftest import FAKE_CAFFE


def test_a_stopped_run_with_uploads_reads_back_equal(tmp_path):
    # A run with every nested part filled: uploads, sinks, the table, a stop rule that fired on a
    # NaN loss (fake-caffe's generated log, its losses nan from iteration 300 on).
    config = RunConfig(command=(sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--nan-at", "300",
                                "--rate", "300", "--on-sigint", "snapshot", "--snapshot-dir", str(tmp_path / "snap")),
                       parsing=ParsingConfig(parser="caffe", year=2026), run=RunDirConfig(dir=str(tmp_path / "run")),
                       watch=WatchConfig(dirs=(str(tmp_path / "snap"),)),
                       upload=UploadConfig(to=f"file://{tmp_path / 'store'}"), stop=StopConfig(when=("loss is nan",)),
                       logging=LoggingConfig(summary=True))
    summary = Run(config, stdout_fd=None, stderr_fd=None).run()
    assert summary.stop_rule is not None and math.isnan(summary.stop_rule.value)
    assert summary.uploads is not None and summary.uploads.sets_verified >= 1 and summary.table
    again = read_summary(tmp_path / "run")
    assert repr(again) == repr(summary)  # NaN != NaN: the reprs say every field is the same


def test_no_summary_or_a_damaged_one_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as err:
        read_summary(tmp_path)
    assert str(err.value) == f"{tmp_path / SUMMARY_NAME}: no summary (the run has not finished, or was killed before its end)"
    (tmp_path / SUMMARY_NAME).write_text('{"run_id": "x", "attemp')
    with pytest.raises(ConfigError) as err:
        read_summary(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / SUMMARY_NAME}: cannot be read: ")
    (tmp_path / SUMMARY_NAME).write_text('{"run_id": "x"}')
    with pytest.raises(ConfigError) as err:
        read_summary(tmp_path)
    assert str(err.value).startswith(f"{tmp_path / SUMMARY_NAME}: not a trainvisor run summary: ")
