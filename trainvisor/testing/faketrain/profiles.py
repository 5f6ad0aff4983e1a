"""How each framework writes its log and meets a stop signal: what the fake training imitates.

A saved log is one file; the program that wrote it wrote two streams. The log cannot say which
line went where, so the fake child writes the whole log to the ONE stream that carried the
framework's metric lines (and so its line numbers, counted per stream, are the log's):

- stderr: Caffe (glog), MXNet (`logging.info`), mmdetection (mmcv's logger), TensorFlow
  (`tf.logging`), YOLO (YOLOv5's tqdm rows and logger, YOLOX's loguru): Python's `logging` and
  tqdm bars write to stderr by default.
- stdout: Keras (its progress bars and epoch lines), detectron2 (`setup_logger` logs to stdout),
  Lightning (its tqdm bars, `file=sys.stdout`, and its Rich bars carry the metrics; its logger's
  lines go to stderr), Hugging Face (the Trainer's metric dicts through `tqdm.write`, stdout; its
  bars on stderr), darknet (`printf` of the iteration and region lines), plain PyTorch scripts
  and unknown formats (a script's `print`).

Where a real run split its output (Lightning's bars on stdout, its checkpoint lines on stderr;
the Trainer's dicts on stdout, its bar on stderr) the log holds them interleaved in an order no
split could restore: the single stream keeps the bytes and the line numbers, so a live run of
the fake and a replay of the log agree record for record. `--stream` picks the other one.

Signals (checked in each framework's source):
- Caffe (`-sigint_effect stop`, the default): SIGINT ends the current iteration, snapshots it
  (`snapshot_after_train`) and exits 0 after ``Optimization stopped early.``; SIGHUP
  (`-sighup_effect snapshot`) snapshots and goes on; SIGTERM is caught by glog's failure
  handler, which prints ``*** SIGTERM ... received by PID`` and dies of it.
- Lightning (`_call_and_handle_interrupt`): SIGINT's KeyboardInterrupt is caught, it logs
  ``Detected KeyboardInterrupt, attempting graceful shutdown ...`` and exits 1.
- Other Python frameworks: KeyboardInterrupt's traceback, then Python dies of SIGINT.
- darknet: no handler, dies of SIGINT.
SIGTERM kills every Python framework and darknet at once (no handler).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["Profile", "PROFILES", "profile_for", "framework_of",
           "SIGINT_SNAPSHOT", "SIGINT_TRACEBACK", "SIGINT_LIGHTNING", "SIGINT_DIE", "SIGINT_IGNORE",
           "SIGTERM_DIE", "SIGTERM_GLOG", "SIGTERM_IGNORE"]

SIGINT_SNAPSHOT = "snapshot"      # Caffe: snapshot the current iteration, exit 0 (SIGHUP: snapshot, go on)
SIGINT_TRACEBACK = "traceback"    # Python: KeyboardInterrupt's traceback, die of SIGINT
SIGINT_LIGHTNING = "lightning"    # Lightning: graceful shutdown message, exit 1
SIGINT_DIE = "die"                # a C program without a handler
SIGINT_IGNORE = "ignore"          # a training that ignores it (what a stop must then escalate past)
SIGTERM_DIE = "die"               # no handler
SIGTERM_GLOG = "glog"             # glog's failure handler: its note, then death
SIGTERM_IGNORE = "ignore"


@dataclass(frozen=True)
class Profile:
    """One framework as the fake child plays it: the stream its log goes to and what SIGINT and
    SIGTERM do to it. A test harness may play a variant (fixtures/bin/fake-caffe: a Caffe that
    dies of SIGINT or ignores SIGTERM)."""

    framework: str
    stream: str
    on_sigint: str
    on_sigterm: str = SIGTERM_DIE


PROFILES = {p.framework: p for p in (
    Profile("caffe", "stderr", SIGINT_SNAPSHOT, SIGTERM_GLOG),
    Profile("mxnet", "stderr", SIGINT_TRACEBACK),
    Profile("mmdet", "stderr", SIGINT_TRACEBACK),
    Profile("tensorflow", "stderr", SIGINT_TRACEBACK),
    Profile("yolo", "stderr", SIGINT_TRACEBACK),
    Profile("huggingface", "stdout", SIGINT_TRACEBACK),
    Profile("lightning", "stdout", SIGINT_LIGHTNING),
    Profile("darknet", "stdout", SIGINT_DIE),
    Profile("keras", "stdout", SIGINT_TRACEBACK),
    Profile("detectron2", "stdout", SIGINT_TRACEBACK),
    Profile("pytorch", "stdout", SIGINT_TRACEBACK),
    Profile("generic", "stdout", SIGINT_TRACEBACK),
)}


def profile_for(framework: str) -> Profile:
    """The profile of a parser name (`trainvisor parsers`); the generic one for any other."""
    return PROFILES.get(framework, PROFILES["generic"])


def framework_of(first_lines: Sequence[str]) -> str:
    """The framework whose log this is, as `auto` would choose its parser from these lines."""
    from ...parsers import parser_infos
    from ...parsers.chooser import choose

    choice = choose((), first_lines, parser_infos(), final=True)
    return choice.name if choice is not None else "generic"
