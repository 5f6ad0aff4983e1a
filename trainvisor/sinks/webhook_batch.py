"""What the webhook sink sends, without any HTTP: epoch statistics in ABEJA's shape, the JSON of
each record, and the packing of held records into request bodies of at most `max_bytes`.

Kept apart from `webhook.py` so the shape of a request and the 1 MB rule are tested on their own.

**Statistics** follow the ABEJA Platform SDK's `abeja.train.statistics.Statistics`: an object with
`epoch`, `num_epochs` (when the sink was told it), and `stages`, a table of stage name -> values
where `accuracy` and `loss` are the names ABEJA charts and any other metric keeps its own name.
Phases map to stages: `train` -> `train`; `val` and `test` -> `validation` (a Caffe test net is
the net it validates on); a Caffe test net other than the first, `validation1`, `validation2`...
A metric named `acc` is written as `accuracy`. Running values (a progress bar's, mid-epoch) are
not epoch statistics and are left out; the raw metrics carry them.

Which records make one epoch:
- a metric with an epoch belongs to that epoch, rounded up when fractional (a Trainer's
  `epoch: 0.37` is a value of the first epoch, in progress); the statistics of an epoch are
  complete when a metric of another epoch arrives (or at the end of the run);
- a log with iterations only (Caffe) has no epochs: there an **evaluation ends an epoch**. Epoch
  N holds the N-th evaluation's values and the last training values at or before its iteration;
  the evaluation Caffe runs at iteration 0, before any training, is epoch 0. Such statistics also
  carry the evaluation's `iteration`, so a reader can place them. Training values after the last
  evaluation make a last epoch with a `train` stage only.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional

from ..events import PHASE_TEST, PHASE_TRAIN, PHASE_VAL, Metric, json_safe

__all__ = ["STAGE_TRAIN", "STAGE_VALIDATION", "stage_of", "EpochStatistics", "Item", "encode", "pack",
           "KINDS", "overhead"]

STAGE_TRAIN = "train"
STAGE_VALIDATION = "validation"
_NAMES = {"acc": "accuracy"}

KINDS = ("metrics", "statistics", "events")
"""The lists of a request body, in this order: raw metrics, epoch statistics, other records."""


def stage_of(m: Metric) -> Optional[str]:
    """The ABEJA stage of `m`'s phase; None for a phase that is neither training nor evaluation."""
    if m.phase == PHASE_TRAIN:
        return STAGE_TRAIN
    if m.phase in (PHASE_VAL, PHASE_TEST):
        return STAGE_VALIDATION + (str(m.test_net) if m.test_net else "")
    return None


class _Epoch:
    """One epoch's statistics as they fill. `evaluated_at`: the iteration of the evaluation that
    ends it, for a log with iterations only (None until that evaluation is seen)."""

    def __init__(self, epoch: Optional[float], by_iteration: bool) -> None:
        self.epoch = epoch
        self.by_iteration = by_iteration
        self.evaluated_at: Optional[int] = None
        self.last_train: Optional[int] = None  # the iteration of its last training value
        self.stages: dict[str, dict[str, Any]] = {}

    def set(self, stage: str, m: Metric) -> None:
        self.stages.setdefault(stage, {})[_NAMES.get(m.name, m.name)] = json_safe(m.value)


class EpochStatistics:
    """Metrics in, one ABEJA statistics object per completed epoch out (see the module's
    docstring). Fed on one thread, in the order the run gave the metrics."""

    def __init__(self, num_epochs: Optional[int] = None) -> None:
        self.num_epochs = num_epochs
        self._open: Optional[_Epoch] = None
        self._next_eval_epoch = 1

    def add(self, m: Metric) -> list[dict]:
        """Statistics of the epochs `m` completes (usually none), in order."""
        stage = stage_of(m)
        if m.running or stage is None:
            return []
        if m.epoch is not None and math.isfinite(m.epoch):
            return self._by_epoch(m, stage)
        if m.iteration is not None:
            return self._by_iteration(m, stage)
        return []

    def finish(self) -> list[dict]:
        """The statistics of the epoch still open at the end of the run."""
        return self._close()

    def _by_epoch(self, m: Metric, stage: str) -> list[dict]:
        epoch = math.ceil(m.epoch)
        out = []
        if self._open is not None and (self._open.by_iteration or self._open.epoch != epoch):
            out = self._close()
        if self._open is None:
            self._open = _Epoch(epoch, by_iteration=False)
        self._open.set(stage, m)
        return out

    def _by_iteration(self, m: Metric, stage: str) -> list[dict]:
        cur, it = self._open, m.iteration
        out = []
        if stage == STAGE_TRAIN:
            if cur is None or not cur.by_iteration or (cur.evaluated_at is not None and it > cur.evaluated_at):
                out = self._close()
                self._open = cur = _Epoch(None, by_iteration=True)
        else:
            if cur is None or not cur.by_iteration or (cur.evaluated_at is not None and cur.evaluated_at != it):
                out = self._close()
                self._open = cur = _Epoch(None, by_iteration=True)
            if cur.evaluated_at is None:
                cur.evaluated_at = it
                cur.epoch = 0 if it == 0 else self._next_eval_epoch
                self._next_eval_epoch += it != 0
        cur.set(stage, m)
        if cur.evaluated_at is None:
            cur.last_train = it
        return out

    def _close(self) -> list[dict]:
        ep, self._open = self._open, None
        if ep is None or not ep.stages:
            return []
        d: dict[str, Any] = {}
        if self.num_epochs is not None:
            d["num_epochs"] = self.num_epochs
        if ep.by_iteration:
            d["epoch"] = self._next_eval_epoch if ep.epoch is None else ep.epoch
            d["iteration"] = ep.evaluated_at if ep.evaluated_at is not None else ep.last_train
        else:
            d["epoch"] = ep.epoch
        d["stages"] = ep.stages
        return [d]


# -- request bodies -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Item:
    """One record as it will be sent: its list in the body (`kind`, one of KINDS) and its JSON."""

    kind: str
    data: bytes


def encode(kind: str, obj: dict) -> Item:
    """`obj` as compact JSON (NaN already written as a string by the records' to_json_dict)."""
    return Item(kind, json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode())


def _body(batch: int, run_id: str, lists: dict[str, list[bytes]],
          identity: Optional[Mapping[str, int]] = None) -> bytes:
    head: dict = {"source": "trainvisor", "batch": batch}
    if run_id:
        head["run_id"] = run_id
    head.update(identity or {})  # a run of several nodes: `node`, `process_rank` (identity.NodeIdentity)
    text = json.dumps(head, separators=(",", ":"), ensure_ascii=False).encode()[:-1]
    return text + b"".join(b',"%s":[%s]' % (k.encode(), b",".join(lists.get(k, ()))) for k in KINDS) + b"}"


def overhead(run_id: str, batch: int = 2 ** 64, identity: Optional[Mapping[str, int]] = None) -> int:
    """The bytes of a body with no record (by default with the largest batch number): an item
    longer than `max_bytes` minus this can never be sent whole."""
    return len(_body(batch, run_id, {}, identity))


def pack(items: Iterable[Item], *, batch: int, max_bytes: int, run_id: str = "",
         identity: Optional[Mapping[str, int]] = None) -> tuple[bytes, dict[str, int]]:
    """The body of one request: the longest prefix of `items` whose JSON is at most `max_bytes`
    (at least one item: each was checked to fit on its own when it was held), and how many items
    of each kind it took. Items keep their order within their kind; none is cut."""
    lists: dict[str, list[bytes]] = {k: [] for k in KINDS}
    size = overhead(run_id, batch, identity)
    for item in items:
        cost = len(item.data) + (1 if lists[item.kind] else 0)
        if size + cost > max_bytes and any(lists.values()):
            break
        lists[item.kind].append(item.data)
        size += cost
    body = _body(batch, run_id, lists, identity)
    return body, {k: len(v) for k, v in lists.items()}
