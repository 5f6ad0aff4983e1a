"""Evaluation tables (pycocotools summary, detectron2 markdown, mmdetection bbox_mAP,
YOLOX best AP, Ultralytics 'all' rows) as every parser that meets them reports them,
on project-written logs in fixtures/logs/."""
from __future__ import annotations

import math

import pytest

from trainvisor.events import Metric
from trainvisor.parsers.tables import coco_name

from .parsing_helpers import FIXTURES, chunked_events, parse_file, parse_text


def vals(events, phase="val"):
    """(name, value, iteration, epoch, line) of every metric of `phase`."""
    return [(e.name, e.value, e.iteration, e.epoch, e.line) for e in events if type(e) is Metric and e.phase == phase]


COCO_12 = [("AP", 0.002), ("AP50", 0.011), ("AP75", 0.001), ("APs", 0.0), ("APm", 0.003), ("APl", 0.004),
           ("AR1", 0.010), ("AR10", 0.025), ("AR100", 0.060), ("ARs", -1.0), ("ARm", 0.070), ("ARl", 0.080)]


@pytest.mark.parametrize("parser", ["pytorch", "auto"])
def test_detr_coco_summary_twelve_values_at_the_last_training_step(parser):
    p, ev = parse_file(FIXTURES / "detr-coco-eval.log", parser)
    got = [v for v in vals(ev) if "/" in v[0]]
    # lines 13-24, after "IoU metric: bbox"; the last training line was "Epoch: [0]  [49/50]" -> step 0 * 50 + 49
    assert got[:12] == [(f"bbox/{n}", v, 49, 0.0, 13 + i) for i, (n, v) in enumerate(COCO_12)]
    # epoch 1's evaluation: two bbox lines, then "IoU metric: segm" names the next one
    assert got[12:] == [("bbox/AP", 0.125, 99, 1.0, 29), ("bbox/AP50", 0.25, 99, 1.0, 30), ("segm/AP", 0.1, 99, 1.0, 32)]
    assert getattr(p, "chosen", "pytorch") == "pytorch"


def test_coco_names_for_keypoint_summaries_too():
    assert coco_name("AP", "0.50:0.95", "all", "100") == "AP"
    assert coco_name("AR", "0.50:0.95", "all", "1") == "AR1"
    assert coco_name("AR", "0.75", "all", "20") == "AR75"
    assert coco_name("AP", "0.50:0.95", "medium", "20") == "APm"


def test_detectron2_evaluation_reported_once_with_copypaste_precision():
    _, ev = parse_file(FIXTURES / "detectron2-eval-tables.log", "detectron2")
    got = vals(ev)
    # the evaluation after iteration 599 is printed before the writer's "iter: 599" line (line 22), as
    # detectron2's hooks run (checkpointer, EvalHook, PeriodicWriter): it is filed at 599
    bbox = [(n, v) for n, v, it, _, line in got if n.startswith("bbox/") and line == 21 and it == 599]
    assert bbox[:5] == [("bbox/AP", 35.7403), ("bbox/AP50", 55.9835), ("bbox/AP75", 38.2289),
                        ("bbox/APs", 19.4153), ("bbox/APm", 40.6835)]
    assert bbox[5][0] == "bbox/APl" and math.isnan(bbox[5][1])
    # the summary's fractions (0.357) and the markdown table (35.740) are the same evaluation: not repeated
    assert [n for n, *_ in got].count("bbox/AP") == 1
    # what copypaste does not repeat stays: the summary's AR100 (line 10)
    assert ("bbox/AR100", 0.512, 599, None, 9) in got
    # a markdown table with no copypaste after it (segm, line 27), at the last iteration (619)
    assert [(n, v, it) for n, v, it, _, line in got if line == 27] == [
        ("segm/AP", 31.5, 619), ("segm/AP50", 52.0, 619), ("segm/AP75", 33.0, 619),
        ("segm/APs", 14.25, 619), ("segm/APm", 34.0, 619), ("segm/APl", 46.5, 619)]
    assert not any("category" in n or n.endswith("/person") for n, *_ in got)


def test_mmdet_summary_val_line_without_total_and_test_results_dict():
    _, ev = parse_file(FIXTURES / "mmdet-eval-results.log", "mmdet")
    assert vals(ev) == [
        ("bbox/AP", 0.358, 100, 1.0, 5),  # pycocotools summary after "Evaluate annotation type *bbox*"
        ("bbox_mAP", 0.358, 100, 1.0, 6), ("bbox_mAP_50", 0.571, 100, 1.0, 6),  # copypaste left out
        ("segm_mAP", 0.312, 100, 1.0, 7), ("segm_mAP_50", 0.52, 100, 1.0, 7),  # OrderedDict([...]) of test.py
    ]
    assert vals(ev, "train")[-1] == ("loss", 1.25, 100, 1.0, 2)


def test_yolox_summary_and_best_ap():
    _, ev = parse_file(FIXTURES / "yolox-eval.log", "yolo")
    # epoch 2/2, iter 20/20 -> step (2 - 1) * 20 + 20
    assert vals(ev) == [("bbox/AP", 0.654, 40, 2.0, 5), ("bbox/AP50", 0.9, 40, 2.0, 6),
                        ("bbox/AR10", 0.7, 40, 2.0, 7), ("best_AP", 65.4, 40, 2.0, 8)]


@pytest.mark.parametrize("parser", ["generic", "auto"])
def test_generic_reads_every_table_form(parser):
    _, ev = parse_file(FIXTURES / "generic-eval-tables.log", parser)
    assert vals(ev) == [
        ("P", 0.716, 200, 1.0, 4), ("R", 0.604, 200, 1.0, 4), ("mAP50", 0.681, 200, 1.0, 4),
        ("mAP50-95", 0.453, 200, 1.0, 4),
        ("bbox/AP", 0.453, 200, 1.0, 6), ("bbox/AR1", 0.321, 200, 1.0, 7),
        ("segm/AP", 45.3, 200, 1.0, 11), ("segm/AP50", 68.1, 200, 1.0, 11),
        ("bbox_mAP", 0.358, 200, 1.0, 12), ("bbox_mAP_50", 0.571, 200, 1.0, 12),
        ("best_AP", 45.3, 200, 1.0, 13),
    ]
    # the IoU / maxDets of the summary lines are no metrics
    assert [n for n, *_ in vals(ev, "train")] == ["loss", "loss"]


@pytest.mark.parametrize("parser", ["detectron2", "pytorch", "mmdet", "yolo", "generic"])
def test_every_detection_parser_reads_the_summary(parser):
    text = ("IoU metric: segm\n"
            " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.250\n"
            "Evaluation results for bbox:\n|  AP  | AP50 |\n|:----:|:----:|\n| 30.0 | 50.5 |\n")
    assert [(e.name, e.value) for e in parse_text(text, parser) if type(e) is Metric] == [
        ("segm/AP", 0.25), ("bbox/AP", 30.0), ("bbox/AP50", 50.5)]


def test_a_broken_markdown_table_gives_nothing_and_ends():
    text = "Evaluation results for bbox:\n| AP | AP50 |\n|:--:|:--:|\n| 30.0 |\nloss: 0.5\n"
    assert [(e.name, e.value, e.phase) for e in parse_text(text, "generic")] == [("loss", 0.5, "train")]


@pytest.mark.parametrize("log,parser", [
    ("detr-coco-eval", "pytorch"), ("detectron2-eval-tables", "detectron2"), ("mmdet-eval-results", "mmdet"),
    ("yolox-eval", "yolo"), ("generic-eval-tables", "generic"), ("detr-coco-eval", "auto"),
    ("detectron2-eval-tables", "auto"), ("yolox-eval", "auto"), ("generic-eval-tables", "auto"),
])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_live_equals_replay(log, parser, chunk):
    line_by_line = chunked_events(FIXTURES / f"{log}.log", parser, 0)
    assert [e for e in line_by_line if type(e) is Metric and e.phase == "val"]
    assert chunked_events(FIXTURES / f"{log}.log", parser, chunk) == line_by_line
