"""`TrainInstance`: one training in the AVA workspace, its folders, its monitors and its uploads.

The original registered the instance with AVA's backend (an id from `create_train_instance`,
its status at `done`). There is no such backend here: the id is the argument, else
`AVA_TRAINING_INS_ID`, else a local one (`local-<time>-<random>`), and the status is written to
`run/<id>/instance.json`. The workspace root is `AVA_WORKSPACE` (default `/workspace`).
"""
from __future__ import annotations

import json
import logging
import os
import re
import secrets
import time
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..monitor.snapshots import EpochSnapshot, SnapshotUploads, destination_of
from ..workspace import Workspace

__all__ = ["TrainInstance", "ID_ENV", "TRAIN_INS_STATUS_RUNNING", "TRAIN_INS_STATUS_DONE", "TRAIN_INS_STATUS_FAIL"]

log = logging.getLogger("trainvisor.compat.ava")

ID_ENV = "AVA_TRAINING_INS_ID"
TRAIN_INS_STATUS_RUNNING, TRAIN_INS_STATUS_DONE, TRAIN_INS_STATUS_FAIL = "running", "done", "failed"
DRAIN_TIMEOUT = 600.0
"""Seconds `done()` waits for the snapshots still uploading; what is left stays in the journal
(`trainvisor-runs`-style, in the run folder) and a later upload of the same run resumes it."""


class TrainInstance:
    """The AVA calls on one training; the run's files go under `<workspace>/run/<id>/`."""

    def __init__(self, training_ins_id: Optional[str] = None, *, env: Optional[Mapping[str, str]] = None,
                 log_to_file: bool = True) -> None:
        self._env = dict(os.environ if env is None else env)
        self.workspace = Workspace.from_env(self._env)
        self.training_ins_id = training_ins_id or self._env.get(ID_ENV) or _local_id()
        self.rundir = str(self.workspace.run_dir(self.training_ins_id))
        self.snapshot_base_path = os.path.join(self.rundir, "output")
        self.log_base_path = os.path.join(self.rundir, "logs")
        for d in (self.snapshot_base_path, self.log_base_path, os.path.join(self.rundir, "tmp")):
            os.makedirs(d, exist_ok=True)
        if log_to_file:
            from ..log.logger import initialize_logger

            initialize_logger(self.log_base_path, debug=True)
        keys = _qiniu_keys(self._env, self.workspace)
        self.uploads = SnapshotUploads(self.rundir, self.training_ins_id, destination_of(self._env, keys),
                                       {**self._env, **keys})
        self.train_ins_spec: dict[str, Any] = {"status": TRAIN_INS_STATUS_RUNNING, "startTime": _now()}
        self._reporter = None
        self._line_hooks: list = []
        self._write_spec()

    # -- the AVA paths ---------------------------------------------------------------------

    def get_training_ins_id(self) -> str:
        return self.training_ins_id

    def get_base_path(self) -> str:
        return self.rundir

    def get_snapshot_base_path(self) -> str:
        return self.snapshot_base_path

    def get_trainset_base_path(self) -> str:
        return str(self.workspace.data("train"))

    def get_valset_base_path(self) -> str:
        return str(self.workspace.data("val"))

    def get_testset_base_path(self) -> str:
        return str(self.workspace.data("test"))

    def get_model_base_path(self) -> str:
        return str(self.workspace.model_dir)

    # -- monitors ------------------------------------------------------------------------

    def reporter(self):
        """The one metric reporter of this instance: `run/<id>/metrics.jsonl` and the configured sinks."""
        if self._reporter is None:
            from ..monitor.reporting import MetricReporter

            self._reporter = MetricReporter(os.path.join(self.rundir, "metrics.jsonl"))
        return self._reporter

    def get_monitor_callback(self, framework: str, **kwargs: Any):
        """"caffe": a line hook for `cmd.logproc`; "mxnet" (batch_size, batch_freq): the list of
        batch-end callbacks for `Module.fit`. None, with a warning, otherwise (as AVA)."""
        if framework == "caffe":
            from ..monitor.caffe import get_log_callback

            return get_log_callback(instance=self)
        if framework == "mxnet":
            if kwargs.get("batch_size") is None or kwargs.get("batch_freq") is None:
                log.warning("no MXNet monitor: batch_size and batch_freq are both needed")
                return None
            from ..monitor.mxnet import batch_end_callback_builder

            return batch_end_callback_builder(kwargs["batch_size"], kwargs["batch_freq"], instance=self,
                                              batches_per_epoch=kwargs.get("batch_of_epoch"))
        log.warning("no monitor for framework %r (caffe, mxnet)", framework)
        return None

    def get_epoch_end_callback(self, framework: str, **kwargs: Any):
        """"caffe": a line hook uploading each epoch's snapshot; "mxnet": `fit`'s epoch-end callback."""
        other_files = kwargs.get("other_files") or ()
        batch_of_epoch = kwargs.get("batch_of_epoch")
        if framework == "caffe":
            from ..monitor.caffe import get_epoch_end_log_callback

            hook = get_epoch_end_log_callback(self, batch_of_epoch=batch_of_epoch, other_files=other_files)
            if hook is not None:
                self._line_hooks.append(hook)  # `done` ends them: a Run's hooks are never told the log ended
            return hook
        if framework == "mxnet":
            if batch_of_epoch is None:
                log.warning("no MXNet epoch-end callback: batch_of_epoch is needed")
                return None
            from ..monitor.mxnet import epoch_end_callback_builder

            return epoch_end_callback_builder(self, batch_of_epoch, other_files=other_files,
                                              epoch_interval=kwargs.get("epoch_interval", 1))
        log.warning("no epoch-end callback for framework %r (caffe, mxnet)", framework)
        return None

    # -- uploads and the end -------------------------------------------------------------

    def upload_snapshot_model(self, cur_epoch: int, batch_of_epoch: int, other_files: Sequence[str] = (), *,
                              files: Optional[Sequence[str]] = None) -> Optional[Exception]:
        """Queue the epoch's snapshot (`files`, default: every file in the snapshot folder) and
        `other_files` as one set; the error, or None once it is queued (as AVA's)."""
        if files is None:
            folder = self.snapshot_base_path
            files = sorted(os.path.join(folder, n) for n in os.listdir(folder)
                           if os.path.isfile(os.path.join(folder, n)))
        if not files:
            return FileNotFoundError(f"no snapshot files for epoch {cur_epoch}")
        try:
            self.uploads.submit(EpochSnapshot(int(cur_epoch), int(batch_of_epoch), tuple(files), tuple(other_files)))
        except Exception as exc:  # a destination that cannot be opened: said, never raised into training
            log.warning("snapshot of epoch %s not queued: %s", cur_epoch, exc)
            return exc
        return None

    def upload_logs(self) -> Optional[Exception]:
        """The run's log folder (`run.log` and its rotations) as the set `logs`, as the original
        did at `done()`; the error, or None once it is queued."""
        for handler in logging.getLogger().handlers:  # the records logged so far are in the file
            handler.flush()  # (the log handler's flush waits for its writer's word)
        # the logs and their rotations, not the log handler's lock, socket and target files
        files = sorted(str(p) for p in Path(self.log_base_path).rglob("*")
                       if p.is_file() and _LOG_NAME.search(p.name) and not p.name.startswith("."))
        if not files:
            return None
        try:
            self.uploads.submit_logs(files)
        except Exception as exc:
            log.warning("the logs were not queued for upload: %s", exc)
            return exc
        return None

    def report_stop(self, err_msg: str = "") -> None:
        self.train_ins_spec.update(stopTime=_now(), errMsg=err_msg,
                                   status=TRAIN_INS_STATUS_FAIL if err_msg else TRAIN_INS_STATUS_DONE)
        self._write_spec()

    def done(self, err_msg: str = "", *, timeout: float = DRAIN_TIMEOUT):
        """The end: the status written, the snapshots waited for (up to `timeout`), the metrics
        flushed and closed. Returns the uploads' report (None when nothing was uploaded)."""
        self.report_stop(err_msg)
        for hook in self._line_hooks:  # a snapshot announced last is whole once the training ended
            hook.finish()
        if self.uploads.url:
            self.upload_logs()
        try:
            report = self.uploads.drain(timeout)
        finally:
            if self._reporter is not None:
                self._reporter.close()
        if report is not None and (report.failed or report.pending):
            log.warning("snapshots not in the store: %d failed, %d pending (their files are kept)",
                        len(report.sets.failed), len(report.sets.pending))
        return report

    def _write_spec(self) -> None:
        path = Path(self.rundir) / "instance.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"instanceID": self.training_ins_id, **self.train_ins_spec}, indent=2) + "\n")
        os.replace(tmp, path)


_LOG_NAME = re.compile(r"\.log(\.\d+)?$")


def _local_id() -> str:
    return f"local-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def _qiniu_keys(env: Mapping[str, str], workspace: Workspace) -> dict[str, str]:
    """QINIU_ACCESS_KEY / QINIU_SECRET_KEY / QINIU_BUCKET from the environment, else from the
    workspace's `config/userinfo` (AVA's JSON: key, secret, bucket)."""
    keys = {k: env[k] for k in ("QINIU_ACCESS_KEY", "QINIU_SECRET_KEY", "QINIU_BUCKET") if env.get(k)}
    try:
        info = json.loads((workspace.config_dir / "userinfo").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return keys
    if isinstance(info, dict):
        for name, field in (("QINIU_ACCESS_KEY", "key"), ("QINIU_SECRET_KEY", "secret"), ("QINIU_BUCKET", "bucket")):
            if not keys.get(name) and isinstance(info.get(field), str):
                keys[name] = info[field]
    return keys
