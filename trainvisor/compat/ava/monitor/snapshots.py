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
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Optional, Sequence

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

    def __init__(self, run_dir: str, run_id: str, url: Optional[str], env: Mapping[str, str], *,
                 delete: Callable[[str], None] = os.unlink) -> None:
        self.run_dir, self.run_id, self.url = run_dir, run_id, url
        self._env = env
        self._delete = delete
        self._manager = None
        self.futures: list[Future] = []

    def open(self):
        """The upload manager, preflighted (a bad destination is one error, raised here)."""
        if self._manager is None:
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
        return self._manager

    def submit(self, snap: EpochSnapshot) -> "Future":
        """Queue the epoch's set; its snapshot files are deleted when it is verified, never before."""
        from ....uploaders.journal import VERIFIED

        files = tuple(CheckpointFile(path=os.path.abspath(p), relpath=f"epoch_{snap.epoch}/{Path(p).name}")
                      for p in (*snap.files, *snap.other_files))
        cp = Checkpoint(name=f"snapshot-model-epoch_{snap.epoch}", files=files,
                        iteration=snap.epoch * snap.batch_of_epoch, epoch=snap.epoch, root=self.run_dir,
                        framework="ava")
        future = self.open().submit(cp)
        owned = tuple(os.path.abspath(p) for p in snap.files)

        def settled(f: Future) -> None:
            outcome = None if f.cancelled() else f.result()
            if outcome is not None and outcome.state == VERIFIED:
                for path in owned:
                    try:
                        self._delete(path)
                    except FileNotFoundError:  # the training removed it already
                        pass
            else:
                log.warning("snapshot of epoch %d not uploaded (%s): its files are kept", snap.epoch,
                            outcome.state if outcome else "cancelled")

        future.add_done_callback(settled)
        self.futures.append(future)
        return future

    def drain(self, timeout: float):
        """Wait for the sets (within `timeout`), then close; the report, or None when nothing was sent."""
        if self._manager is None:
            return None
        try:
            return self._manager.drain(timeout)
        finally:
            self._manager.close()
            self._manager = None
