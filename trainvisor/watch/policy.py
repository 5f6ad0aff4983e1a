"""Which complete checkpoints are handed to the uploader.

`all`        every checkpoint.
`epoch-end`  checkpoints that end an epoch: the name carries an epoch (Keras,
             MXNet, Lightning `epoch=`), or `iteration % iters_per_epoch == 0`.
             A checkpoint whose epoch cannot be decided IS uploaded: an extra
             upload costs less than a lost checkpoint.
`every-N`    every N-th distinct checkpoint in completion order (the N-th, 2N-th ...).
             Counting checkpoints, not iterations, works for every framework,
             including names without numbers.
`last`       only the newest checkpoint matters: every one is handed over as it
             completes (a killed node must not lose them all), and the upload
             queue skips a set a newer one superseded before its upload began
             (uploaders/superseded.py); one already uploading is finished.
A checkpoint already selected is handed over again when its files change.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from ..defaults import UPLOAD_POLICY
from ..errors import ConfigError
from ..events import Checkpoint

__all__ = ["UploadPolicy", "parse_policy", "POLICY_CHOICES"]

POLICY_CHOICES = "all|epoch-end|every-N|last"
_EVERY = re.compile(r"every-?(\d+)$")


@dataclass(frozen=True)
class UploadPolicy:
    kind: str = UPLOAD_POLICY
    every: int = 1
    iters_per_epoch: Optional[int] = None

    @property
    def skips_superseded(self) -> bool:
        """True when a queued set a newer one replaced is not worth uploading (`last`)."""
        return self.kind == "last"

    def epoch_of(self, cp: Checkpoint) -> Optional[float]:
        if cp.epoch is not None:
            return cp.epoch
        if cp.iteration is not None and self.iters_per_epoch:
            return cp.iteration / self.iters_per_epoch
        return None

    def selects(self, cp: Checkpoint, ordinal: int) -> bool:
        """`ordinal` is the 1-based count of distinct checkpoints completed so far."""
        if self.kind in ("all", "last"):
            return True
        if self.kind == "every":
            return ordinal % self.every == 0
        # epoch-end
        if cp.epoch is not None and float(cp.epoch).is_integer():
            return True
        if cp.iteration is not None and self.iters_per_epoch:
            return cp.iteration % self.iters_per_epoch == 0
        return cp.epoch is None


def parse_policy(text: str, *, iters_per_epoch: Optional[int] = None) -> UploadPolicy:
    t = (text or "all").strip().lower()
    if t in ("all", "last", "epoch-end"):
        return UploadPolicy(t, 1, iters_per_epoch)
    m = _EVERY.match(t)
    if m and int(m.group(1)) > 0:
        return UploadPolicy("every", int(m.group(1)), iters_per_epoch)
    raise ConfigError(f"bad --upload-policy {text!r}: expected {POLICY_CHOICES} (e.g. every-5)")
