"""Every real log in ../shared/real-logs: `auto` picks the right parser, and the values
a reader finds in the file come out (first/last loss with their step, validation
counts, best validation values, checkpoints). Values were read from the files with
grep; the file and the line are named next to each assertion."""
from __future__ import annotations

import math

import pytest

from .parsing_helpers import REAL_LOGS, checkpoints, parse_file, series

pytestmark = pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"real logs not found at {REAL_LOGS}")

CHOICES = {
    "caffe/bearpaw-fork-mnist.log": "caffe",
    "caffe/digits-googlenet-6-test-outputs.log": "caffe",
    "caffe/digits-robond-lenet.log": "caffe",
    "caffe/ducha-adaadam-libcudart-error.log": "generic",  # one shell error line, no training at all
    "caffe/ducha-adadelta1e-7.log": "caffe",
    "caffe/ducha-caffenet128-lab.log": "caffe",
    "caffe/ducha-squeezenet224-2gpu.log": "caffe",
    "caffe/oxford102-vggs-old-caffe.log": "caffe",
    "caffe/pycaffe-centerloss-squeezenet.log": "caffe",
    "caffe/pyfrcnn-alt-opt-zf.log": "caffe",
    "caffe/qiexing-glog-file-header.log": "caffe",
    "caffe/simplenet-imagenet-2gpu.log": "caffe",
    "caffe/simplenet-mnist-windows.log": "caffe",
    "caffe/ssd-nwpu-conv3.log": "caffe",
    "caffe/ssd-voc0712-nul-tail.log": "caffe",
    "darknet/darknet-yolov3-tiny-nan.log": "darknet",
    "detectron2/bupt-d2-faster-c4.log": "detectron2",
    "detectron2/bupt-d2-rpn-fpn-backbone-fpn.log": "detectron2",
    "huggingface/eshaubale-hf-trainer-padded.log": "huggingface",
    "huggingface/llama-sft-trl-tqdm-cr.log": "huggingface",
    "keras/esartic-sound-cnn-30ep.log": "keras",
    "keras/kanji-keras1-verbose2-50ep.log": "keras",
    "keras/kanji-keras1-verbose2-earlystop.log": "keras",
    "keras/keras3-utf16le-ansi.log": "keras",
    "lightning/wandb-lightning-progress.log": "lightning",
    "mmdetection/mmdet2-faster-rcnn-12ep-json.log": "mmdet",
    "mmdetection/mmdet2-faster-rcnn-12ep.log": "mmdet",
    "mxnet/ouyangchao-mxnet-cls.log": "mxnet",
    "mxnet/sparks-gluon-ssd.log": "mxnet",
    "mxnet/tornadomeet-resnet164-cifar10.log": "mxnet",
    "mxnet/tornadomeet-resnet18-imagenet.log": "mxnet",
    "pytorch/cifar10-tutorial-pbs.log": "pytorch",
    "pytorch/detr-log-jsonl.log": "generic",  # JSON lines: the generic parser's JSON mode
    "pytorch/detr-metriclogger-ddp.log": "pytorch",
    "tensorflow/bert-similarity-estimator.log": "tensorflow",
    "tensorflow/xlnet-ner-custom-crlf.log": "generic",  # a project's own logging format
    "yolo/yolov5-results-mushrooms.log": "yolo",
    "yolo/yolov5-stdout-cpu.log": "yolo",
    "yolo/yolox-gbk-crlf.log": "yolo",
}

_cache: dict = {}


def events_of(rel: str):
    if rel not in _cache:
        _cache[rel] = parse_file(REAL_LOGS / rel, "auto")
    return _cache[rel]


def test_every_real_log_is_listed_here():
    found = {p.relative_to(REAL_LOGS).as_posix() for p in REAL_LOGS.glob("*/*.log")}
    assert found == set(CHOICES)


@pytest.mark.parametrize("rel", sorted(CHOICES))
def test_auto_picks_the_right_parser(rel):
    parser, _ = events_of(rel)
    assert parser.chosen == CHOICES[rel], parser.reason


@pytest.mark.parametrize("rel", sorted(r for r, p in CHOICES.items() if p == "caffe"))
def test_auto_on_caffe_logs_gives_exactly_the_caffe_parsers_events(rel):
    _, auto_events = events_of(rel)
    _, caffe_events = parse_file(REAL_LOGS / rel, "caffe")
    assert caffe_events
    assert [e.without_wall_time() if hasattr(e, "without_wall_time") else e.path for e in auto_events] == \
        [e.without_wall_time() if hasattr(e, "without_wall_time") else e.path for e in caffe_events]


def test_log_with_no_training_gives_no_metrics():
    _, ev = events_of("caffe/ducha-adaadam-libcudart-error.log")
    assert ev == []


def first_last(s):
    return (s[0].value, s[0].iteration, s[0].epoch), (s[-1].value, s[-1].iteration, s[-1].epoch)


# -- MXNet -------------------------------------------------------------------

def test_mxnet_module_speedometer_validation_and_checkpoints():
    _, ev = events_of("mxnet/ouyangchao-mxnet-cls.log")
    acc = series(ev, "accuracy")
    # line 2: Epoch[0] Batch [20] Speed: 142.33 samples/sec accuracy=0.562500
    assert (acc[0].value, acc[0].iteration, acc[0].epoch) == (0.5625, 20, 0.0)
    assert series(ev, "samples_per_sec")[0].value == 142.33
    val = series(ev, "accuracy", "val")
    assert len(val) == 10 and max(v.value for v in val) == 0.948918  # Epoch[9] Validation-accuracy
    assert series(ev, "time_cost")[0].value == 140.99
    cps = checkpoints(ev)
    assert len(cps) == 10 and cps[-1].path == "models/img_cls-0010.params" and cps[-1].epoch == 10.0


def test_mxnet_feedforward_train_prefix_and_300_validation_points():
    _, ev = events_of("mxnet/tornadomeet-resnet164-cifar10.log")
    val = series(ev, "accuracy", "val")
    assert len(val) == 300
    best = max(val, key=lambda m: m.value)
    assert (best.value, best.epoch) == (0.953224, 281.0)
    assert val[-1].value == 0.952927
    first = series(ev, "accuracy")[0]  # Epoch[0] Batch [50] ... Train-accuracy=0.198750
    assert (first.value, first.iteration) == (0.19875, 50)
    assert len(checkpoints(ev)) == 300


def test_mxnet_top_k_custom_metric_name():
    _, ev = events_of("mxnet/tornadomeet-resnet18-imagenet.log")
    topk = series(ev, "top_k_accuracy_5")
    assert (topk[0].value, topk[0].iteration, topk[0].epoch) == (0.011484, 100, 0.0)
    assert len(series(ev, "top_k_accuracy_5", "val")) == 120
    assert series(ev, "accuracy", "val")[-1].value == 0.692602


def test_mxnet_gluon_custom_format_with_scientific_values():
    _, ev = events_of("mxnet/sparks-gluon-ssd.log")
    ce = series(ev, "CrossEntropy")
    assert first_last(ce) == ((1.69, 0, 0.0), (0.00807, 50, 59.0))
    ap = series(ev, "AP", "val")
    assert len(ap) == 120 and ap[-1].value == 0.614


# -- Keras -------------------------------------------------------------------

def test_keras1_verbose2_three_fits():
    _, ev = events_of("keras/kanji-keras1-verbose2-50ep.log")
    loss = series(ev, "loss")
    assert (loss[0].value, loss[0].epoch) == (3.5508, 1.0)  # line 3: 224s - loss: 3.5508
    assert (loss[-1].value, loss[-1].epoch) == (0.0455, 14.0)  # last line: Epoch 14/14, no val
    val = series(ev, "acc", "val")
    assert len(val) == 33 and max(v.value for v in val) == 0.9747


def test_keras_early_stopping_line_does_not_shift_the_epoch():
    _, ev = events_of("keras/kanji-keras1-verbose2-earlystop.log")
    val = series(ev, "acc", "val")
    assert len(val) == 25
    # "Epoch 6/10", "Epoch 00005: early stopping", then epoch 6's metrics
    assert (val[-1].value, val[-1].epoch) == (0.9848, 6.0)


def test_keras2_progress_bar_with_samples():
    _, ev = events_of("keras/esartic-sound-cnn-30ep.log")
    val = series(ev, "acc", "val")
    assert len(val) == 300
    assert (val[-1].value, val[-1].epoch) == (0.7324, 30.0)
    assert series(ev, "loss")[0].value == 2.1921


def test_keras3_utf16_ansi_crlf_progress_bars():
    _, ev = events_of("keras/keras3-utf16le-ansi.log")
    val = series(ev, "accuracy", "val")
    assert len(val) == 60  # one per "Epoch N/60"
    last = series(ev, "loss", "val")[-1]
    assert (last.value, last.epoch, last.iteration) == (0.53, 60.0, 60 * 49)
    first = series(ev, "loss")[0]  # " 1/49 ━━━ 1:06 1s/step - accuracy: 0.0000e+00 - loss: 1.5527"
    assert (first.value, first.iteration, first.epoch) == (1.5527, 1, 1.0)
    assert series(ev, "learning_rate")[-1].value == 1.25e-04


# -- Hugging Face / Lightning / PyTorch ---------------------------------------

def test_hf_trainer_dicts_with_padding():
    _, ev = events_of("huggingface/eshaubale-hf-trainer-padded.log")
    loss = series(ev, "loss")
    assert len(loss) == 17
    assert first_last(loss) == ((1.6282, 1, 0.22), (0.01, 17, 8.85))
    ev_loss = series(ev, "loss", "val")
    assert len(ev_loss) == 14 and ev_loss[0].value == 0.0012160619953647256


def test_trl_string_values_and_tqdm_carriage_returns():
    _, ev = events_of("huggingface/llama-sft-trl-tqdm-cr.log")
    loss = series(ev, "loss")
    assert (loss[0].value, loss[0].epoch) == (3.412, 0.0179)
    assert series(ev, "num_tokens")[1].value == 3.629e04
    # 167 loss dicts are in the bytes; 3 of them start a physical line that a "\r" tqdm bar
    # then redraws (line 91: {'loss': '0.7535', ... 'epoch': '0.8591'}\r 29%|...): a reader saw
    # them before the bar came, so the terminal line model offers them (the old final-state
    # rule kept only the last bar and lost them).
    assert len(loss) == 167
    assert [(m.line, m.value, m.epoch) for m in loss if m.line in (91, 424)] == [(91, 0.7535, 0.8591), (424, 0.6584, 1.825)]
    # the bar is shorter than the dict: its redraws leave the dict's tail on the row; that
    # tail ('entropy': ..., 'epoch': ...}) is no dict of its own: one value per dict, no more
    assert {n: len(series(ev, n)) for n in ("entropy", "num_tokens", "mean_token_accuracy", "grad_norm")} == dict.fromkeys(
        ("entropy", "num_tokens", "mean_token_accuracy", "grad_norm"), 167)
    val = series(ev, "loss", "val")
    assert [v.value for v in val] == [0.7417, 0.715, 0.7206]


def test_lightning_validation_values_once_per_change():
    _, ev = events_of("lightning/wandb-lightning-progress.log")
    acc = series(ev, "acc", "val")
    # first shown by the next epoch's bar, filed (as Lightning's metrics.csv does) at the epoch validated
    assert [a.epoch for a in acc] == [float(e) for e in range(0, 9)]
    assert [a.iteration for a in acc[:2]] == [351, 707]  # that epoch's last batch seen (0-based, bar counts 356)
    assert max(a.value for a in acc) == 0.352 and acc[0].value == 0.227


def test_pytorch_cifar_tutorial_inside_logging_prefix():
    _, ev = events_of("pytorch/cifar10-tutorial-pbs.log")
    loss = series(ev, "loss")
    assert len(loss) == 6
    assert first_last(loss) == ((2.19, 2000, 1.0), (1.522, 12000, 1.0))


def test_detr_metric_logger_train_and_test_lines():
    _, ev = events_of("pytorch/detr-metriclogger-ddp.log")
    loss = series(ev, "loss")
    assert len(loss) == 140  # 150 "Epoch: [" lines, 10 of them "Epoch: [N] Total time: ..."
    assert (loss[0].value, loss[0].iteration, loss[0].epoch) == (68.5848, 0, 0.0)
    assert len(series(ev, "loss", "val")) == 20  # 30 "Test:" lines, 10 of them "Test: Total time"
    assert series(ev, "loss", "val")[0].value == 53.8736


def test_detr_coco_summaries_after_every_epoch():
    _, ev = events_of("pytorch/detr-metriclogger-ddp.log")
    ap = series(ev, "bbox/AP", "val")
    # 10 evaluations of 12 lines each, after "IoU metric: bbox" (lines 90-102 ... 405-417)
    assert sum(len(series(ev, f"bbox/{n}", "val")) for n in
               ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")) == 120
    # line 91: "... (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.000", after "Epoch: [0]  [127/128]"
    assert (ap[0].value, ap[0].iteration, ap[0].epoch, ap[0].line) == (0.0, 127, 0.0, 91)
    # line 406: "= 0.002", after "Epoch: [9]  [127/128]" (line 396)
    assert (ap[-1].value, ap[-1].iteration, ap[-1].epoch, ap[-1].line) == (0.002, 9 * 128 + 127, 9.0, 406)
    assert series(ev, "bbox/AP50", "val")[-1].value == 0.004  # line 407
    assert series(ev, "bbox/ARl", "val")[-1].value == 0.005  # line 417


def test_detr_json_lines_train_and_test_keys():
    _, ev = events_of("pytorch/detr-log-jsonl.log")
    loss = series(ev, "loss")
    assert [(m.value, m.epoch) for m in loss] == [
        (29.48173644657824, 0.0), (28.115209819918054, 1.0), (27.72094430462943, 2.0), (27.5140688483518, 3.0)]
    # "test_loss", "test_coco_eval_bbox": the program's word for the phase is kept (test)
    assert series(ev, "loss", "test")[-1].value == 57.89172291870117
    assert series(ev, "coco_eval_bbox/0", "test")[0].value == 1.1089818659285284e-09


# -- detection -----------------------------------------------------------------

def test_detectron2_iterations_eval_and_checkpoints():
    _, ev = events_of("detectron2/bupt-d2-faster-c4.log")
    tl = series(ev, "total_loss")
    assert len(tl) == 4628
    assert first_last(tl) == ((4.146, 19, None), (0.627, 89999, None))
    assert series(ev, "lr")[0].value == 0.0004
    assert series(ev, "bbox/AP", "val")[0].value == 35.7403
    cps = checkpoints(ev)
    assert cps[0].path == "faster_c4_output/model_0004999.pth" and cps[0].iteration == 4999
    assert cps[-1].path == "faster_c4_output/model_final.pth"


def test_detectron2_rpn_only_losses_and_proposal_recall():
    _, ev = events_of("detectron2/bupt-d2-rpn-fpn-backbone-fpn.log")
    assert len(series(ev, "total_loss")) == 450
    assert series(ev, "box_proposals/AR@1000", "val")[0].value == 57.9835


def test_mmdet_text_log_losses_eval_and_checkpoints():
    _, ev = events_of("mmdetection/mmdet2-faster-rcnn-12ep.log")
    loss = series(ev, "loss")
    assert first_last(loss) == ((1.4563, 50, 1.0), (0.219, 11 * 361 + 350, 12.0))
    assert series(ev, "lr")[0].value == 2.473e-04
    m = series(ev, "bbox_mAP", "val")
    assert len(m) == 12 and max(x.value for x in m) == 0.358
    assert len(checkpoints(ev)) == 12


def test_mmdet_json_log_agrees_with_the_text_log():
    _, ev = events_of("mmdetection/mmdet2-faster-rcnn-12ep-json.log")
    loss = series(ev, "loss")
    assert first_last(loss) == ((1.45626, 50, 1.0), (0.21902, 11 * 361 + 350, 12.0))
    assert [m.iteration for m in series(ev, "bbox_mAP", "val")][-1] == 12 * 361
    _, text_ev = events_of("mmdetection/mmdet2-faster-rcnn-12ep.log")
    assert [m.iteration for m in series(ev, "loss")] == [m.iteration for m in series(text_ev, "loss")]


def test_yolov5_results_txt_table():
    _, ev = events_of("yolo/yolov5-results-mushrooms.log")
    box = series(ev, "box")
    assert len(box) == 100 and (box[0].value, box[0].epoch) == (0.09831, 0.0)
    m = series(ev, "mAP@.5", "val")
    assert m[-1].value == 0.5582 and len(m) == 100
    assert series(ev, "box", "val")[-1].value == 0.04283


def test_yolov5_stdout_epoch_rows_and_all_rows():
    _, ev = events_of("yolo/yolov5-stdout-cpu.log")
    box = series(ev, "box")
    assert len(box) == 10 and box[0].value == 0.05812
    m = series(ev, "mAP@.5:.95", "val")
    # 10 epochs, then the final validation of the best weights prints an 11th "all" row (line 116)
    assert len(m) == 11 and m[0].value == 0.00834 and m[-1].value == 0.135


def test_yolox_gbk_crlf():
    _, ev = events_of("yolo/yolox-gbk-crlf.log")
    tl = series(ev, "total_loss")
    assert len(tl) == 1240
    assert first_last(tl) == ((10.7, 10, 1.0), (1.1, 299 * 47 + 40, 300.0))
    assert series(ev, "lr")[0].value == 7.073e-06


def test_yolox_best_ap_of_both_runs():
    _, ev = events_of("yolo/yolox-gbk-crlf.log")
    best = series(ev, "best_AP", "val")
    # line 2329: "... the best AP is 0.00"; line 5047: "... the best AP is 90.00" (last iter line 5040: epoch 300, iter 40/47)
    assert [(b.value, b.line) for b in best] == [(0.0, 2329), (90.0, 5047)]
    assert (best[-1].iteration, best[-1].epoch) == (299 * 47 + 40, 300.0)


def test_darknet_nan_region_values_are_metrics():
    _, ev = events_of("darknet/darknet-yolov3-tiny-nan.log")
    loss = series(ev, "loss")
    assert len(loss) == 3000 and loss[0].iteration == 6001 and loss[0].value == 5.444418
    assert series(ev, "avg_loss")[0].value == 5.444418
    iou = series(ev, "region16/avg_iou")
    assert math.isnan(iou[0].value)  # "Region 16 Avg IOU: -nan"
    assert iou[0].iteration is None  # resumed run: printed before the first "6001: ..." line
    assert iou[1].iteration == 6002  # after "6001: ...", the Region lines belong to 6002


def test_tensorflow_estimator_loss_eval_and_checkpoints():
    _, ev = events_of("tensorflow/bert-similarity-estimator.log")
    loss = series(ev, "loss")
    # 55 "loss = X, step = N" lines, then line 411 "INFO:tensorflow:Loss for final step: 0.0025181356."
    # at the step of the checkpoint before it (line 410: "Saving checkpoints for 5468")
    assert len(loss) == 56
    assert first_last(loss) == ((1.0218862, 0, None), (0.0025181356, 5468, None))
    assert (loss[-2].value, loss[-2].iteration, loss[-1].line) == (0.01693129, 5400, 411)
    assert len(series(ev, "global_step/sec")) == 54
    acc = series(ev, "accuracy", "val")
    assert [(a.value, a.iteration) for a in acc][-1] == (0.8500477, 5468)
    assert series(ev, "loss", "val")[-1].value == 0.7216634
    assert len(checkpoints(ev)) == 15


def test_custom_tf_logging_falls_back_to_generic_and_reads_step():
    _, ev = events_of("tensorflow/xlnet-ner-custom-crlf.log")
    loss = series(ev, "loss")
    assert len(loss) == 39
    assert first_last(loss) == ((31.083714, 100, None), (11.056624, 3900, None))
    # lines 1-8 are the configuration (num_tags: 7, lstm_dim: 200, ..., lr: 0.001): no metrics
    assert {m.name for m in ev} == {"loss"}
