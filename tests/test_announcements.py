"""Checkpoint announcements of the non-Caffe frameworks: the events each parser yields on the
project's fixture logs (in the frameworks' real formats, strings checked against their source),
identical whether the bytes arrive whole, line by line or in small pieces; the Lightning strings
(read by `parsers/announcements.py`); mmdetection's folder; the real logs where present."""
from __future__ import annotations

import pytest

from trainvisor.events import CheckpointEvent

from trainvisor.parsers.announcements import (KIND_LIGHTNING, huggingface_save, keras_save, lightning_save,
                                              yolo_stripped)

from .parsing_helpers import FIXTURES, REAL_LOGS, checkpoints, chunked_events, parse_file, parse_text

# (fixture, parser): [(path, kind, iteration, epoch, line)]
EXPECTED = {
    ("announcements/huggingface", "huggingface"): [
        ("out/checkpoint-500", "trainer", 500, None, 5),
        ("out/checkpoint-1000", "trainer", 1000, None, 11),
        ("out", "trainer", None, None, 19),        # the final save_model(): no step in the folder's name
    ],
    ("announcements/keras", "keras"): [
        ("ckpt/best.keras", "keras", None, 1.0, 3),
        ("ckpt/best.keras", "keras", None, 3.0, 11),  # epoch 2 "did not improve": no save
        ("ckpt/weights.03.weights.h5", "keras", None, 3.0, 13),  # "finished saving" (line 14) is no announcement
    ],
    ("announcements/keras2", "keras"): [
        ("ckpt/weights.01-0.40.h5", "keras", None, 1.0, 3),
        ("ckpt/weights.02-0.35.h5", "keras", None, 2.0, 7),
    ],
    ("announcements/yolo", "yolo"): [
        ("runs/detect/train/weights/last.pt", "stripped", None, None, 7),
        ("runs/detect/train/weights/best.pt", "stripped", None, None, 8),  # "Results saved to" is no checkpoint
    ],
    ("announcements/mmengine", "mmdet"): [
        ("/data/work_dirs/rtmdet_tiny/epoch_1.pth", "pth", None, 1.0, 6),   # "Checkpoints will be saved to" wins
        ("/data/work_dirs/rtmdet_tiny/iter_200.pth", "pth", 200, None, 8),  # over the config's work_dir
    ],
    ("detectron2", "detectron2"): [("output/model_0000999.pth", "pth", 999, None, 3)],
    ("mmdet", "mmdet"): [("/data/work_dirs/faster_rcnn/epoch_1.pth", "pth", None, 1.0, 3)],  # mmcv's work_dir
}


def _rows(events):
    return [(e.path, e.kind, e.iteration, e.epoch, e.line) for e in checkpoints(events)]


@pytest.mark.parametrize("fixture,parser", sorted(EXPECTED))
def test_fixture_announcements_are_checkpoint_events(fixture, parser):
    _, events = parse_file(FIXTURES / f"{fixture}.log", parser)
    assert _rows(events) == EXPECTED[fixture, parser]


@pytest.mark.parametrize("fixture,parser", sorted(EXPECTED))
def test_auto_chooses_the_format_and_yields_the_same_announcements(fixture, parser):
    chosen, events = parse_file(FIXTURES / f"{fixture}.log", "auto")
    assert chosen.chosen == parser and _rows(events) == EXPECTED[fixture, parser]


@pytest.mark.parametrize("fixture,parser", sorted(EXPECTED))
@pytest.mark.parametrize("chunk", [0, 1, 7, 4096])
def test_live_pieces_give_the_events_of_the_whole_file(fixture, parser, chunk):
    whole = chunked_events(FIXTURES / f"{fixture}.log", parser, 1 << 20)
    assert chunked_events(FIXTURES / f"{fixture}.log", parser, chunk) == whole
    assert [e for e in whole if type(e) is tuple] == [(p, k, i, ln) for p, k, i, _, ln in EXPECTED[fixture, parser]]


def test_mmdet_save_before_the_log_names_a_folder_yields_no_event():
    text = "2022-11-02 10:05:00,000 - mmdet - INFO - Saving checkpoint at 1 epochs\n"
    assert checkpoints(parse_text(text, "mmdet")) == []


# -- Lightning: the strings for lightning.py --------------------------------------------------

def test_lightning_announcements_of_the_fixture():
    lines = (FIXTURES / "announcements" / "lightning.log").read_text().splitlines()
    found = [(n, a) for n, a in enumerate(map(lightning_save, lines), 1) if a is not None]
    assert found == [
        (2, ("/tmp/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt", 10, 0)),
        (6, ("ckpts/epoch=2.ckpt", 30, 2)),  # Lightning 1.0-1.2: "step", double quotes
    ]
    assert KIND_LIGHTNING == "ckpt"


@pytest.mark.parametrize("line,want", [
    ("Epoch 00001: saving model to /tmp/ck/epoch=0.ckpt", ("/tmp/ck/epoch=0.ckpt", None, 1)),  # Lightning 0.x
    ("Epoch 1, global step 100: 'val_loss' was not in top 1", None),
    ("Epoch 4, global step 500: 'val_acc' reached 0.91000 (best 0.91000), saving model to "
     "'/r/my ckpts/epoch=4-step=500.ckpt' as top 3", ("/r/my ckpts/epoch=4-step=500.ckpt", 500, 4)),
])
def test_lightning_forms(line, want):
    assert lightning_save(line) == want


@pytest.mark.parametrize("reader,line,want", [
    (keras_save, "Epoch 3: val_loss improved from None to 0.31000, saving model to best.keras", ("best.keras", None, 3)),
    (keras_save, "Epoch 1: finished saving model to ckpt/w.keras", None),
    (keras_save, "Epoch 2: val_loss did not improve from 0.40000", None),
    (huggingface_save, "Saving model checkpoint to /abs/run/checkpoint-42", ("/abs/run/checkpoint-42", 42, None)),
    (yolo_stripped, "Optimizer stripped from runs/train/exp/weights/best.pt, saved as runs/b.pt, 14.8MB",
     ("runs/b.pt", None, None)),
    (yolo_stripped, "Results saved to runs/train/exp", None),
])
def test_announcement_forms(reader, line, want):
    assert reader(line) == want


# -- the real logs -----------------------------------------------------------------------------

needs_real_logs = pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"real logs not found at {REAL_LOGS}")


@needs_real_logs
def test_real_mmdet2_saves_land_in_the_runners_work_dir():
    _, events = parse_file(REAL_LOGS / "mmdetection" / "mmdet2-faster-rcnn-12ep.log", "mmdet")
    rows = _rows(events)
    # the config dump's relative work_dir, then "Start running ... work_dir: /abs" before the first save
    assert [r[0] for r in rows] == [f"/workspace/projects/work_dirs/base_faster/epoch_{n}.pth" for n in range(1, 13)]
    assert rows[0][1:] == ("pth", None, 1.0, 305) and rows[-1][3:] == (12.0, 415)


@needs_real_logs
def test_real_detectron2_saves():
    _, events = parse_file(REAL_LOGS / "detectron2" / "bupt-d2-rpn-fpn-backbone-fpn.log", "detectron2")
    rows = _rows(events)
    assert rows[0] == ("rpn_fpn_out_backbone_fpn/model_0004999.pth", "pth", 4999, None, 565)
    assert rows[-1][0] == "rpn_fpn_out_backbone_fpn/model_final.pth" and rows[-1][4] == 1008
    assert len(rows) == 19


def test_the_lightning_parser_reports_its_announcements_as_checkpoint_events():
    path = FIXTURES / "announcements" / "lightning.log"
    parser, events = parse_file(path, "lightning")
    cps = [(e.line, e.path, e.kind, e.iteration, e.epoch) for e in events if isinstance(e, CheckpointEvent)]
    assert cps == [(2, "/tmp/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt", "ckpt", 10, 0.0),
                   (6, "ckpts/epoch=2.ckpt", "ckpt", 30, 2.0)]
    # the bars' values are still read: loss of each epoch's final bar
    assert [m.value for m in events if getattr(m, "name", None) == "loss" and m.phase == "train" and not m.running] == \
        [0.69, 0.51, 0.41]
