"""The checkpoint tracker, table-driven: every completion rule with a fake clock and a fake
`stat`, no threads, no files, no sleeping. Each case is a script of steps; each step sets the
clock and the files' (size, mtime) and feeds one event; `handed` is what must come out of it."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pytest

from trainvisor.events import Checkpoint
from trainvisor.watch import CheckpointTracker, UploadPolicy, default_recognizers, parse_policy
from trainvisor.watch.fsevents import (Announced, FileChanged, FileClosed, FileDeleted, FileFound, FileMoved,
                                       FileStat, Tick, TrackerEvent)

ROOT = "/run/ckpt"
PT = f"{ROOT}/model_step_10.pt"
PT2 = f"{ROOT}/model_step_20.pt"
PT3 = f"{ROOT}/model_step_30.pt"
W = f"{ROOT}/lenet_iter_500.caffemodel"
S = f"{ROOT}/lenet_iter_500.solverstate"
LAST = f"{ROOT}/last.ckpt"


@dataclass
class Step:
    at: float                                  # the clock when the event is fed
    event: TrackerEvent
    files: dict[str, Optional[tuple]] = field(default_factory=dict)  # (size, mtime[, ctime]); None: gone
    handed: list[str] = field(default_factory=list)    # checkpoint names handed over by this step


@dataclass
class Case:
    name: str
    steps: list[Step]
    finish: list[str] = field(default_factory=list)    # handed over by finish() at the end
    poll: bool = False
    settle: float = 2.0
    partial_after: float = 120.0
    policy: UploadPolicy = UploadPolicy()
    completed_by: Optional[dict[str, int]] = None
    partial: int = 0


class World:
    """The fake clock and filesystem the tracker sees."""

    def __init__(self) -> None:
        self.now = 0.0
        self.files: dict[str, FileStat] = {}

    def clock(self) -> float:
        return self.now

    def stat(self, path: str) -> Optional[FileStat]:
        return self.files.get(path)

    def apply(self, changes: dict) -> None:
        for path, st in changes.items():
            if st is None:
                self.files.pop(path, None)
            else:
                self.files[path] = FileStat(*st)


def _tracker(case: Case, world: World) -> CheckpointTracker:
    return CheckpointTracker([ROOT], default_recognizers(), poll=case.poll, settle=case.settle,
                             partial_after=case.partial_after, policy=case.policy, clock=world.clock,
                             stat=world.stat)


CASES = [
    Case("close_after_write_completes_at_once", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(0.5, FileChanged(PT), {PT: (20, 2)}),
        Step(0.6, FileClosed(PT), handed=["model_step_10.pt"]),
    ], completed_by={"close": 1}),
    Case("rename_within_the_tree_completes_at_once", [
        Step(0.0, FileChanged(f"{ROOT}/model_step_10.pt.tmp"), {f"{ROOT}/model_step_10.pt.tmp": (10, 1)}),
        Step(0.1, FileMoved(f"{ROOT}/model_step_10.pt.tmp", PT), {PT: (10, 1)}, handed=["model_step_10.pt"]),
    ], completed_by={"rename": 1}),
    Case("moved_in_from_outside_the_tree_completes_at_once", [
        Step(0.0, FileMoved(None, PT), {PT: (10, 1)}, handed=["model_step_10.pt"]),
    ], completed_by={"rename": 1}),
    Case("created_under_polling_completes_by_settling", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(1.9, Tick()),
        Step(2.0, Tick(), handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"settle": 1}),
    Case("moved_in_under_polling_is_complete_at_once_by_its_ctime", [
        Step(0.0, FileChanged(PT), {PT: (10, 1, 5)}, handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"rename": 1}),
    Case("polling_rename_with_ctime_after_mtime_is_complete_at_once", [
        Step(0.0, FileMoved(f"{ROOT}/m.pt.tmp", PT, by_rename=False), {PT: (10, 1, 5)}, handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"rename": 1}),
    Case("polling_sees_a_change_with_ctime_after_mtime_again_and_hands_over_the_new_state", [
        Step(0.0, FileChanged(PT), {PT: (10, 1, 5)}, handed=["model_step_10.pt"]),
        Step(0.1, FileChanged(PT), {PT: (10, 1, 9)}),          # a chmod: the same version
        Step(1.0, FileChanged(PT), {PT: (12, 20, 30)}, handed=["model_step_10.pt"]),   # replaced by a move
    ], poll=True, completed_by={"rename": 2}),
    Case("polling_move_is_no_proof_and_settles", [
        Step(0.0, FileMoved(f"{ROOT}/old.bin", PT, by_rename=False), {PT: (10, 1)}),
        Step(1.0, Tick()),
        Step(2.0, Tick(), handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"settle": 1}),
    Case("settle_restarts_when_the_file_grows", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(1.5, Tick(), {PT: (20, 2)}),
        Step(3.0, Tick()),
        Step(3.5, Tick(), handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"settle": 1}),
    Case("polling_seeing_the_accepted_state_again_hands_over_nothing", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(2.0, Tick(), handed=["model_step_10.pt"]),
        Step(2.5, FileChanged(PT)),
        Step(5.0, Tick()),
    ], poll=True, completed_by={"settle": 1}),
    Case("created_under_inotify_waits_for_its_close", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(100.0, Tick()),
    ]),   # no close ever came: the end-of-run reconciliation (below) makes it settle
    Case("file_found_by_a_scan_settles_even_under_inotify", [
        Step(0.0, FileFound(PT), {PT: (10, 1)}),
        Step(1.0, Tick()),
        Step(2.0, Tick(), handed=["model_step_10.pt"]),
    ], completed_by={"settle": 1}),
    Case("log_announcement_completes_at_once", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(0.1, Announced(PT), handed=["model_step_10.pt"]),
    ], poll=True, completed_by={"log": 1}),
    Case("announcement_of_a_missing_file_proves_nothing", [
        Step(0.0, Announced(PT)),
    ]),
    Case("caffe_set_needs_weights_and_solverstate", [
        Step(0.0, FileClosed(W), {W: (100, 1)}),
        Step(0.2, FileChanged(S), {S: (50, 2)}),
        Step(0.3, FileClosed(S), handed=["lenet_iter_500"]),
    ], completed_by={"close": 2}),
    Case("partial_set_is_handed_over_after_partial_after", [
        Step(0.0, FileClosed(W), {W: (100, 1)}),
        Step(9.9, Tick()),
        Step(10.0, Tick(), handed=["lenet_iter_500"]),
    ], partial_after=10.0, partial=1),
    Case("partial_set_is_handed_over_at_finish", [
        Step(0.0, FileClosed(W), {W: (100, 1)}),
    ], finish=["lenet_iter_500"], partial=1),
    Case("rewrite_after_hand_over_is_handed_over_again", [
        Step(0.0, FileClosed(LAST), {LAST: (10, 1)}, handed=["last.ckpt"]),
        Step(1.0, FileChanged(LAST), {LAST: (12, 2)}),
        Step(1.1, FileClosed(LAST), handed=["last.ckpt"]),
        Step(1.2, FileClosed(LAST)),   # the same state again: nothing new
    ], completed_by={"close": 3}),
    Case("rename_over_a_handed_over_file_hands_it_over_again", [
        Step(0.0, FileClosed(LAST), {LAST: (10, 1)}, handed=["last.ckpt"]),
        Step(5.0, FileMoved(f"{ROOT}/last.ckpt.tmp", LAST), {LAST: (11, 7)}, handed=["last.ckpt"]),
    ]),
    Case("deleted_file_is_forgotten", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(0.1, FileDeleted(PT), {PT: None}),
    ]),
    Case("moved_out_of_the_tree_is_forgotten", [
        Step(0.0, FileChanged(PT), {PT: (10, 1)}),
        Step(0.1, FileMoved(PT, "/elsewhere/model_step_10.pt"), {PT: None}),
    ]),
    Case("files_outside_the_roots_and_unrelated_files_are_ignored", [
        Step(0.0, FileClosed("/other/model_step_10.pt"), {"/other/model_step_10.pt": (1, 1)}),
        Step(0.1, FileClosed(f"{ROOT}/train.log"), {f"{ROOT}/train.log": (1, 1)}),
    ]),
    Case("policy_every_2_hands_over_the_second_of_each_pair", [
        Step(0.0, FileClosed(PT), {PT: (1, 1)}),
        Step(0.1, FileClosed(PT2), {PT2: (1, 1)}, handed=["model_step_20.pt"]),
        Step(0.2, FileClosed(PT3), {PT3: (1, 1)}),
        Step(0.3, FileChanged(PT), {PT: (2, 2)}),
        Step(0.4, FileClosed(PT)),    # skipped once, skipped for good
    ], policy=parse_policy("every-2")),
    # `last` no longer waits for the end (a killed node lost every checkpoint): each set goes as it
    # completes, and the upload queue skips the superseded ones (tests/uploaders/test_superseded.py).
    Case("policy_last_hands_over_each_set_as_it_completes", [
        Step(0.0, FileClosed(PT), {PT: (1, 1)}, handed=["model_step_10.pt"]),
        Step(0.1, FileClosed(PT2), {PT2: (1, 1)}, handed=["model_step_20.pt"]),
    ], policy=UploadPolicy("last")),
    Case("policy_epoch_end_uses_iterations_per_epoch", [
        Step(0.0, FileClosed(PT), {PT: (1, 1)}),
        Step(0.1, FileClosed(PT2), {PT2: (1, 1)}, handed=["model_step_20.pt"]),
    ], policy=parse_policy("epoch-end", iters_per_epoch=20)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_tracker_completion_rules(case: Case):
    world = World()
    tracker = _tracker(case, world)
    for i, step in enumerate(case.steps):
        world.now = step.at
        world.apply(step.files)
        got = [cp.name for cp in tracker.feed(step.event)]
        assert got == step.handed, f"step {i} ({step.event})"
    assert [cp.name for cp in tracker.finish()] == case.finish
    if case.completed_by is not None:
        assert tracker.stats.completed_by == case.completed_by
    assert tracker.stats.partial == case.partial


def test_complete_caffe_set_carries_both_files_relative_to_the_root():
    world = World()
    tracker = _tracker(Case("", []), world)
    world.apply({W: (100, 1), S: (50, 2)})
    tracker.feed(FileClosed(W))
    (cp,) = tracker.feed(FileClosed(S))
    assert isinstance(cp, Checkpoint)
    assert [(f.path, f.relpath) for f in cp.files] == [(S, "lenet_iter_500.solverstate"),
                                                       (W, "lenet_iter_500.caffemodel")]
    assert (cp.iteration, cp.root, cp.framework) == (500, ROOT, "caffe")


def test_epoch_from_iterations_is_filled_in_by_the_policy():
    world = World()
    tracker = _tracker(Case("", [], policy=parse_policy("all", iters_per_epoch=5)), world)
    world.apply({PT: (1, 1)})
    (cp,) = tracker.feed(FileClosed(PT))
    assert cp.epoch == 2.0


def test_reconcile_settles_what_the_observer_never_reported_and_skips_files_from_before():
    world = World()
    tracker = _tracker(Case("", [], settle=1.0), world)
    world.apply({PT: (5, 1), PT2: (7, 1)})
    initial = {PT: FileStat(5, 1)}                   # PT was there before the run, unchanged
    tracker.reconcile(sorted(world.files.items()), initial)
    assert tracker.settling
    world.now = 1.0
    assert [cp.name for cp in tracker.feed(Tick())] == ["model_step_20.pt"]
    assert not tracker.settling
    assert tracker.finish() == []


def test_reconcile_leaves_a_file_complete_in_its_reported_state_alone():
    world = World()
    tracker = _tracker(Case("", []), world)
    world.apply({PT: (5, 1)})
    assert [cp.name for cp in tracker.feed(FileClosed(PT))] == ["model_step_10.pt"]
    tracker.reconcile(sorted(world.files.items()), {})
    assert not tracker.settling and tracker.finish() == []
