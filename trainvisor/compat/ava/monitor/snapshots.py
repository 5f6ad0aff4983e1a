"""The epoch-end uploads: one checkpoint set per epoch through trainvisor's upload manager
(journal, retries, verification, a manifest), to `TRAINVISOR_UPLOAD_TO` (any file://, s3://,
kodo:// URL) or, when that is unset and Qiniu keys are configured, to Kodo as the original did.

The original tarred the snapshot folder, uploaded the tarball with a 60-second token and then
deleted the snapshot files whether the upload had worked or not. Here the files go one object
each (a manifest lists them), and a snapshot file is deleted only once its whole set is verified
in the store; the `other_files` are never deleted.
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from ....events import Checkpoint, CheckpointFile

__all__ = ["UPLOAD_ENV", "KODO_PREFIX", "EpochSnapshot", "SnapshotUploads", "destination_of"]

log = logging.getLogger("trainvisor.compat.ava")

UPLOAD_ENV = "TRAINVISOR_UPLOAD_TO"
KODO_PREFIX = "ava/default/models"
"""Where the original put snapshot models in the user's bucket; the fallback keeps it."""


@dataclass(frozen=True)
class EpochSnapshot:
    """What one epoch's set holds: the snapshot's files (deleted once verified) and the extra
    files named by the caller (kept)."""

    epoch: int
    batch_of_epoch: int
    files: tuple[str, ...]
    other_files: tuple[str, ...] = ()


def destination_of(env: Mapping[str, str], keys: Mapping[str, str]) -> Optional[str]:
    """The URL snapshots go to: `TRAINVISOR_UPLOAD_TO`, else `kodo://<bucket>/ava/default/models`
    when Qiniu keys and a bucket are known (`keys`: QINIU_ACCESS_KEY, QINIU_SECRET_KEY,
    QINIU_BUCKET, from the environment or the workspace's user info); None: nothing is uploaded."""
    url = env.get(UPLOAD_ENV)
    if url:
        return url
    if keys.get("QINIU_ACCESS_KEY") and keys.get("QINIU_SECRET_KEY") and keys.get("QINIU_BUCKET"):
        region = "" if (env.get("QINIU_UP_HOST") or env.get("QINIU_REGION")) else "?region=z0"
        return f"kodo://{keys['QINIU_BUCKET']}/{KODO_PREFIX}{region}"  # z0: the zone AVA assumed
    return None


class SnapshotUploads:
    """Opened on the first snapshot (so a script that never snapshots never loads an SDK);
    `drain` at `done()`. Submitting never blocks on the network after the first, preflighted, open."""

    def __init__(self, run_dir: str, run_id: str, url: Optional[str], env: Mapping[str, str]) -> None:
        self.run_dir, self.run_id, self.url = run_dir, run_id, url
        self._env = env
        self._manager = None
        self._lock = threading.Lock()  # hooks may run on a Run's pipeline thread, MXNet's on fit's
        self.futures: list[Future] = []

    def open(self):
        """The upload manager, preflighted (a bad destination is one error, raised here)."""
        with self._lock:
            return self._manager or self._opened()

    def _opened(self):
        if not self.url:
            from ....errors import ConfigError

            raise ConfigError(f"no destination for snapshots: set {UPLOAD_ENV} (file://, s3://, kodo://) "
                              "or the Qiniu keys and bucket")
        from ....uploaders import open_uploader
        from ....uploaders.destinations import RUN_KEYS, key_prefix, parse_destination
        from ....uploaders.manager import UploadManager

        parse_destination(self.url, setting=UPLOAD_ENV)
        uploader = open_uploader(self.url, state_dir=self.run_dir, env=self._env)
        manager = UploadManager(uploader, run_dir=self.run_dir, run_id=self.run_id,
                                prefix=key_prefix(self.url), key_template=RUN_KEYS)
        try:
            manager.preflight()
        except BaseException:
            manager.close()
            raise
        self._manager = manager
        return manager

    def submit(self, snap: EpochSnapshot) -> "Future":
        """Queue the epoch's set: its files copied to `tmp/epoch_N` (the set uploaded is the
        epoch's even when the training writes a file again: MXNet's symbol file, each epoch), as
        the original tarred them there. Once verified the copies and the snapshot files (in the
        version copied) are deleted; a set that failed keeps both. The future resolves after
        that, so a caller that waits on it sees the files as they will stay."""
        return self._submit(f"snapshot-model-epoch_{snap.epoch}", f"epoch_{snap.epoch}", snap.files,
                            snap.other_files, iteration=snap.epoch * snap.batch_of_epoch, epoch=snap.epoch)

    def submit_logs(self, files: Sequence[str]) -> "Future":
        """The run's log files as the set `logs` (`<prefix>/<id>/logs/<file>`), as the original
        uploaded them at `done()`; copied first (the log is still being written), never deleted."""
        return self._submit("logs", "logs", (), files, iteration=None, epoch=None)

    def _submit(self, name: str, folder: str, owned_files: Sequence[str], kept_files: Sequence[str], *,
                iteration: Optional[int], epoch: Optional[int]) -> "Future":
        from ....uploaders.journal import VERIFIED

        staged = Path(self.run_dir) / "tmp" / folder
        staged.mkdir(parents=True, exist_ok=True)
        files, owned = [], []
        for i, path in enumerate((*owned_files, *kept_files)):
            copy = staged / Path(path).name
            shutil.copy2(path, copy)
            files.append(CheckpointFile(path=str(copy), relpath=f"{folder}/{copy.name}"))
            if i < len(owned_files):
                owned.append((os.path.abspath(path), _version(str(copy))))
        cp = Checkpoint(name=name, files=tuple(files), iteration=iteration, epoch=epoch, root=str(staged),
                        framework="ava")
        sent = self.open().submit(cp)
        settled: Future = Future()  # resolves once the files are dealt with, not merely uploaded

        def settle(f: Future) -> None:
            try:
                outcome = None if f.cancelled() else f.result()
                if outcome is None or outcome.state != VERIFIED:
                    log.warning("set %s not uploaded (%s): its files are kept", name,
                                outcome.state if outcome else "cancelled")
                else:
                    for path, version in owned:
                        if _version(path) == version:  # not written again since it was copied
                            _unlink(path)
                    shutil.rmtree(staged, ignore_errors=True)
            except BaseException as exc:  # an upload's own error, or one deleting: the caller sees it
                settled.set_exception(exc)
            else:
                settled.set_result(outcome)

        sent.add_done_callback(settle)
        self.futures.append(settled)
        return settled

    def drain(self, timeout: float):
        """Wait for the sets (within `timeout`), then close; the report, or None when nothing was sent."""
        with self._lock:
            manager, self._manager = self._manager, None
        if manager is None:
            return None
        try:
            return manager.drain(timeout)
        finally:
            manager.close()


def _version(path: str) -> Optional[tuple[int, int]]:
    """Size and modification time: copy2 keeps the time, so a copy has its original's version."""
    try:
        st = os.stat(path)
    except FileNotFoundError:  # the training removed it already
        return None
    return (st.st_size, st.st_mtime_ns)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
