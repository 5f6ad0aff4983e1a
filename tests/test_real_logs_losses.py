"""No training loss a reader can see is lost: for every real log in ../shared/real-logs, the
training-loss records (how many, the first and the last with their step and epoch) and the
last validation value, as the file shows them.

Every figure was read from the file with grep/awk, never from trainvisor; the line quoted in
each comment is the file's (1-based, as `grep -n` numbers it). Counts are of the lines grep
finds with the pattern given. A `None` step or epoch: the line prints none.

Caffe: test_caffe_reference.py compares the tables with parse_log.py's CSVs, whose train rows
come from "Train net output" lines; the "Iteration N, loss = X" line a reader follows (and the
solver's last one, after the CSV's last row) is asserted here, for the logs without CSVs too.
One evaluation printed several times (detectron2's summary, table and copypaste; TensorFlow's
eval dict and its "Eval results" block) counts once. No log here has absl's two-handler
duplicates (bert-similarity prints only the INFO:tensorflow: form: grep -c '^I[0-9]{4} ' is 0).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import pytest

from trainvisor.events import Metric

from .parsing_helpers import REAL_LOGS, chunked_events, series
from .test_real_logs import CHOICES, events_of

pytestmark = pytest.mark.skipif(not REAL_LOGS.is_dir(), reason=f"real logs not found at {REAL_LOGS}")


class Seen(NamedTuple):
    """One record as a reader finds it: its value, step, epoch and line."""

    value: float
    iteration: Optional[int]
    epoch: Optional[float]
    line: int


class TrainLoss(NamedTuple):
    """The training-loss series a reader follows in one log."""

    name: str
    count: int
    first: Seen
    last: Seen


class LastValidation(NamedTuple):
    """The validation (or test) series a reader looks at last, and its last record."""

    name: str
    phase: str
    count: int
    last: Seen


def seen(m) -> Seen:
    return Seen(m.value, m.iteration, m.epoch, m.line)


# Caffe: the "Iteration N ..., loss = X" lines (grep -c -E 'Iteration [0-9]+.*loss = '), the
# solver's final "Iteration N, loss = X" after the last snapshot included; the last test value is
# the last "Test net output" line, at the iteration of the "Iteration N, Testing net" line above it.
TRAIN_LOSS = {
    # 500: "solver.cpp:214] Iteration 0, loss = 10.0777"; 877: "solver.cpp:276] Iteration 10000, loss = 0.00307831"
    "caffe/bearpaw-fork-mnist.log": TrainLoss("total_loss", 101, Seen(10.0777, 0, None, 500), Seen(0.00307831, 10000, None, 877)),
    # 6673: "Iteration 0 (0 iter/s, 10.3911s/29 iter), loss = 3.98836"; 6917: "Iteration 1160 (...), loss = 0.00278008"
    "caffe/digits-googlenet-6-test-outputs.log": TrainLoss(
        "total_loss", 41, Seen(3.98836, 0, None, 6673), Seen(0.00278008, 1160, None, 6917)),
    # 1195: "Iteration 0 (0 iter/s, 1.26811s/1 iter), loss = 2.30648"; 2541: "solver.cpp:342] Iteration 390, loss = 0.120141"
    "caffe/digits-robond-lenet.log": TrainLoss("total_loss", 391, Seen(2.30648, 0, None, 1195), Seen(0.120141, 390, None, 2541)),
    # 1524: "Iteration 0, loss = 7.32732"; 3933: "Iteration 15540, loss = 5.59171"
    "caffe/ducha-adadelta1e-7.log": TrainLoss("total_loss", 778, Seen(7.32732, 0, None, 1524), Seen(5.59171, 15540, None, 3933)),
    # 1632: "Iteration 0, loss = 7.39676"; 1881: "Iteration 1620, loss = 6.90398" (then the SIGTERM trace)
    "caffe/ducha-caffenet128-lab.log": TrainLoss("total_loss", 82, Seen(7.39676, 0, None, 1632), Seen(6.90398, 1620, None, 1881)),
    # resumed: 3441: "Iteration 240, loss = 6.86874"; 20924: "solver.cpp:321] Iteration 170000, loss = 1.65175"
    "caffe/ducha-squeezenet224-2gpu.log": TrainLoss(
        "total_loss", 4245, Seen(6.86874, 240, None, 3441), Seen(1.65175, 170000, None, 20924)),
    # 1045: "solver.cpp:189] Iteration 0, loss = 5.4591"; 1697: "Iteration 14800, loss = 0.00026788"
    "caffe/oxford102-vggs-old-caffe.log": TrainLoss(
        "total_loss", 297, Seen(5.4591, 0, None, 1045), Seen(0.00026788, 14800, None, 1697)),
    # 1396: "Iteration 0, loss = 9.2707"; 3796: "Iteration 199500, loss = 1.77334"
    "caffe/pycaffe-centerloss-squeezenet.log": TrainLoss(
        "total_loss", 400, Seen(9.2707, 0, None, 1396), Seen(1.77334, 199500, None, 3796)),
    # 4 solvers one after another: 801: "Iteration 0 (2.27325e+08 iter/s, ...), loss = 4.74855";
    # 22726: "Iteration 11620 (8.07434 iter/s, 2.47698s/20 iters), loss = 0.550334"
    "caffe/pyfrcnn-alt-opt-zf.log": TrainLoss("total_loss", 4582, Seen(4.74855, 0, None, 801), Seen(0.550334, 11620, None, 22726)),
    # 603: "Iteration 0, loss = 2.6409"; 1289: "solver.cpp:291] Iteration 20000, loss = 0.00260472"
    "caffe/qiexing-glog-file-header.log": TrainLoss(
        "total_loss", 201, Seen(2.6409, 0, None, 603), Seen(0.00260472, 20000, None, 1289)),
    # 2636: "Iteration 0, loss = 7.1751"; 6005: "Iteration 98900, loss = 2.58794"
    "caffe/simplenet-imagenet-2gpu.log": TrainLoss("total_loss", 990, Seen(7.1751, 0, None, 2636), Seen(2.58794, 98900, None, 6005)),
    # 2592: "Iteration 0, loss = 4.1066e-005"; 3975: "Iteration 36100, loss = 1.1158e-006" (then "solver.cpp^C")
    "caffe/simplenet-mnist-windows.log": TrainLoss(
        "total_loss", 362, Seen(4.1066e-05, 0, None, 2592), Seen(1.1158e-06, 36100, None, 3975)),
    # 6105: "Iteration 0, loss = 18.3923"; 9787: "Iteration 12130, loss = 1.28678"
    "caffe/ssd-nwpu-conv3.log": TrainLoss("total_loss", 1214, Seen(18.3923, 0, None, 6105), Seen(1.28678, 12130, None, 9787)),
    # 5365: "Iteration 0, loss = 22.859"; 8486: "Iteration 10360, loss = 3.83667" (then NUL bytes)
    "caffe/ssd-voc0712-nul-tail.log": TrainLoss("total_loss", 1037, Seen(22.859, 0, None, 5365), Seen(3.83667, 10360, None, 8486)),
    # grep -c -E '^ ?[0-9]+: [-0-9.na]+, [-0-9.na]+ avg': 8: "6001: 5.444418, 5.444418 avg, ..."; 12602: "9000: 3.196224, 9.366272 avg"
    "darknet/darknet-yolov3-tiny-nan.log": TrainLoss("loss", 3000, Seen(5.444418, 6001, None, 8), Seen(3.196224, 9000, None, 12602)),
    # grep -c 'total_loss:': 847: "iter: 19  total_loss: 4.146"; 6729: "iter: 89999  total_loss: 0.627"
    "detectron2/bupt-d2-faster-c4.log": TrainLoss("total_loss", 4628, Seen(4.146, 19, None, 847), Seen(0.627, 89999, None, 6729)),
    # 541: "iter: 199  total_loss: 0.292"; 1062: "iter: 89999  total_loss: 0.093"
    "detectron2/bupt-d2-rpn-fpn-backbone-fpn.log": TrainLoss(
        "total_loss", 450, Seen(0.292, 199, None, 541), Seen(0.093, 89999, None, 1062)),
    # grep -c "{'loss'"; the Trainer prints no step: the step is the dict's rank (huggingface.py)
    # 62: "{'loss': 1.6282, ..., 'epoch': 0.22}"; 100: "{'loss': 0.01, ..., 'epoch': 8.85}"
    "huggingface/eshaubale-hf-trainer-padded.log": TrainLoss(
        "loss", 17, Seen(1.6282, 1, 0.22, 62), Seen(0.01, 17, 8.85, 100)),
    # grep -o "{'loss': '": 44: "{'loss': '3.412', ..., 'epoch': '0.0179'}"; 768: "{'loss': '0.5822', ..., 'epoch': '2.988'}"
    "huggingface/llama-sft-trl-tqdm-cr.log": TrainLoss(
        "loss", 167, Seen(3.412, 1, 0.0179, 44), Seen(0.5822, 167, 2.988, 768)),
    # grep -c ' - loss: ' (10 folds of 30 epochs); the step counts samples (keras.py):
    # 41: "15726/15726 [===] - 14s 873us/step - loss: 2.1921"; 689 (Epoch 30/30): "15825/15825 [===] - ... - loss: 0.6241"
    "keras/esartic-sound-cnn-30ep.log": TrainLoss(
        "loss", 300, Seen(2.1921, 15726, 1.0, 41), Seen(0.6241, 30 * 15825, 30.0, 689)),
    # grep -c 'loss:' (three fits, no step printed): 3: "224s - loss: 3.5508"; 138 (Epoch 14/14): "274s - loss: 0.0455"
    "keras/kanji-keras1-verbose2-50ep.log": TrainLoss("loss", 66, Seen(3.5508, None, 1.0, 3), Seen(0.0455, None, 14.0, 138)),
    # 3: "3083s - loss: 1.7197"; 55 (after "Epoch 6/10", "Epoch 00005: early stopping"): "3122s - loss: 0.0134"
    "keras/kanji-keras1-verbose2-earlystop.log": TrainLoss(
        "loss", 25, Seen(1.7197, None, 1.0, 3), Seen(0.0134, None, 6.0, 55)),
    # UTF-16: iconv -f UTF-16LE | grep -c -- '- loss: ' is 3000 bar rows, 49 steps an epoch: each epoch ends with two
    # "49/49" rows at one step, the last batch's (its bar's average, 3150: 0.4237) and the epoch-end line with
    # val_ (3151: 0.4159, the epoch's value), one record (keras.py): 2940. 34: " 1/49 ... - loss: 1.5527"
    "keras/keras3-utf16le-ansi.log": TrainLoss("loss", 2940, Seen(1.5527, 1, 1.0, 34), Seen(0.4159, 60 * 49, 60.0, 3151)),
    # grep -c '"mode": "train"': 2: "epoch": 1, "iter": 50, "loss": 1.45626; 96: "epoch": 12, "iter": 350, "loss": 0.21902
    "mmdetection/mmdet2-faster-rcnn-12ep-json.log": TrainLoss(
        "loss", 84, Seen(1.45626, 50, 1.0, 2), Seen(0.21902, 11 * 361 + 350, 12.0, 96)),
    # 298: "Epoch [1][50/361] ... loss: 1.4563"; 414: "Epoch [12][350/361] ... loss: 0.2190"
    "mmdetection/mmdet2-faster-rcnn-12ep.log": TrainLoss(
        "loss", 84, Seen(1.4563, 50, 1.0, 298), Seen(0.219, 11 * 361 + 350, 12.0, 414)),
    # grep -c 'CrossEntropy=': 1: "[Epoch 0][Batch 0], ... CrossEntropy=1.69e+00"; 120: "[Epoch 59][Batch 50], ... CrossEntropy=8.07e-03"
    "mxnet/sparks-gluon-ssd.log": TrainLoss("CrossEntropy", 120, Seen(1.69, 0, 0.0, 1), Seen(0.00807, 50, 59.0, 120)),
    # 12: "[1,  2000] loss: 2.190"; 17: "[1, 12000] loss: 1.522"
    "pytorch/cifar10-tutorial-pbs.log": TrainLoss("loss", 6, Seen(2.19, 2000, 1.0, 12), Seen(1.522, 12000, 1.0, 17)),
    # one JSON object a line, "train_loss" and "epoch" (no step): lines 1 and 4
    "pytorch/detr-log-jsonl.log": TrainLoss(
        "loss", 4, Seen(29.48173644657824, None, 0.0, 1), Seen(27.5140688483518, None, 3.0, 4)),
    # grep -c 'Epoch: \[[0-9]*\] *\[': 68: "Epoch: [0]  [  0/128] ... loss: 68.5848 (68.5848)";
    # 396: "Epoch: [9]  [127/128] ... loss: 26.5718 (25.9192)" (the "Averaged stats:" line repeats it)
    "pytorch/detr-metriclogger-ddp.log": TrainLoss(
        "loss", 140, Seen(68.5848, 0, 0.0, 68), Seen(26.5718, 9 * 128 + 127, 9.0, 396)),
    # grep -c 'loss = .*, step = ' is 55, plus 411: "Loss for final step: 0.0025181356." (at the step of
    # line 410's checkpoint, 5468); 288: "loss = 1.0218862, step = 0"
    "tensorflow/bert-similarity-estimator.log": TrainLoss(
        "loss", 56, Seen(1.0218862, 0, None, 288), Seen(0.0025181356, 5468, None, 411)),
    # grep -c 'NER loss:': 14: "step:100/23196, NER loss:31.083714"; 52: "step:3900/23196, NER loss:11.056624"
    "tensorflow/xlnet-ner-custom-crlf.log": TrainLoss("loss", 39, Seen(31.083714, 100, None, 14), Seen(11.056624, 3900, None, 52)),
    # results.txt, column 6 (total): 1: "0/99 1.86G 0.09831 0.09352 0 0.1918"; 100: "99/99 1.93G ... 0.1083"
    "yolo/yolov5-results-mushrooms.log": TrainLoss("total", 100, Seen(0.1918, None, 0.0, 1), Seen(0.1083, None, 99.0, 100)),
    # no total column in the console rows: box, the first loss: 59: "0/9 0G 0.05812"; 104: "9/9 0G 0.03722"
    "yolo/yolov5-stdout-cpu.log": TrainLoss("box", 10, Seen(0.05812, None, 0.0, 59), Seen(0.03722, None, 9.0, 104)),
    # grep -c 'total_loss: ' (two runs): 2269: "epoch: 1/300, iter: 10/47, ... total_loss: 10.7";
    # 5040: "epoch: 300/300, iter: 40/47, ... total_loss: 1.1"
    "yolo/yolox-gbk-crlf.log": TrainLoss("total_loss", 1240, Seen(10.7, 10, 1.0, 2269), Seen(1.1, 299 * 47 + 40, 300.0, 5040)),
}

# Logs that print no training loss at all: a reader sees accuracies, speeds, validation values.
NO_TRAIN_LOSS = {
    "caffe/ducha-adaadam-libcudart-error.log": "one shell error line",
    "lightning/wandb-lightning-progress.log": "the bar's postfix has v_num, val_loss, val_acc only",
    "mxnet/ouyangchao-mxnet-cls.log": "grep -ci loss: 0 (accuracy=, Train-accuracy=, Validation-accuracy=)",
    "mxnet/tornadomeet-resnet164-cifar10.log": "grep -ci loss: 0",
    "mxnet/tornadomeet-resnet18-imagenet.log": "grep -ci loss: 0",
}

# The last validation (or test) value of each log that has one.
VALIDATION = {
    # caffe: count = grep -c 'Testing net'; bearpaw 878: "Iteration 10000, Testing net (#0)",
    # 880: "Test net output #1: loss = 0.0509408 (* 1 = 0.0509408 loss)"
    "caffe/bearpaw-fork-mnist.log": LastValidation("loss", "test", 21, Seen(0.0509408, 10000, None, 880)),
    # 6924: "Iteration 1185, Testing net (#0)"; 6932: "Test net output #5: loss2/loss = 0.00111515 (* 0.3 = ...)"
    "caffe/digits-googlenet-6-test-outputs.log": LastValidation("loss2/loss", "test", 6, Seen(0.00111515, 1185, None, 6932)),
    # 2542: "Iteration 390, Testing net (#0)"; 2545: "Test net output #1: loss = 0.0766324"
    "caffe/digits-robond-lenet.log": LastValidation("loss", "test", 31, Seen(0.0766324, 390, None, 2545)),
    # 3847: "Iteration 15000, Testing net (#0)"; 3850: "Test net output #1: loss = 5.31826"
    "caffe/ducha-adadelta1e-7.log": LastValidation("loss", "test", 15, Seen(5.31826, 15000, None, 3850)),
    # 1783: "Iteration 1000, Testing net (#0)"; 1786: "Test net output #1: loss = 6.90778"
    "caffe/ducha-caffenet128-lab.log": LastValidation("loss", "test", 2, Seen(6.90778, 1000, None, 1786)),
    # 20925: "Iteration 170000, Testing net (#0)"; 20929: "Test net output #2: loss = 1.80022"
    "caffe/ducha-squeezenet224-2gpu.log": LastValidation("loss", "test", 34, Seen(1.80022, 170000, None, 20929)),
    # 1683: "Iteration 14500, Testing net (#0)"; 1684: "Test net output #0: accuracy = 0.823709" (no test loss)
    "caffe/oxford102-vggs-old-caffe.log": LastValidation("accuracy", "test", 30, Seen(0.823709, 14500, None, 1684)),
    # 1290: "Iteration 20000, Testing net (#0)"; 1291: "Test net output #0: loss = 0.0147376"
    "caffe/qiexing-glog-file-header.log": LastValidation("loss", "test", 41, Seen(0.0147376, 20000, None, 1291)),
    # 5974: "Iteration 98000, Testing net (#0)"; 5977: "Test net output #2: loss = 2.89997"
    "caffe/simplenet-imagenet-2gpu.log": LastValidation("loss", "test", 99, Seen(2.89997, 98000, None, 5977)),
    # 3969: "Iteration 36000, Testing net (#0)"; 3971: "Test net output #1: loss = 0.0165724"
    "caffe/simplenet-mnist-windows.log": LastValidation("loss", "test", 61, Seen(0.0165724, 36000, None, 3971)),
    # 9745: "Iteration 12000, Testing net (#0)"; 9747: "Test net output #0: detection_eval = 0.745901"
    "caffe/ssd-nwpu-conv3.log": LastValidation("detection_eval", "test", 7, Seen(0.745901, 12000, None, 9747)),
    # 8374: "Iteration 10000, Testing net (#0)"; 8377: "Test net output #0: detection_eval = 0.642119"
    "caffe/ssd-voc0712-nul-tail.log": LastValidation("detection_eval", "test", 1, Seen(0.642119, 10000, None, 8377)),
    # one evaluation, printed three times (summary, table, copypaste) and reported once; 6728:
    # "copypaste: 35.7403,55.9835,..." after the training's end (the iter 89999 line, 6729, comes after it)
    "detectron2/bupt-d2-faster-c4.log": LastValidation("bbox/AP", "val", 1, Seen(35.7403, 89999, None, 6728)),
    # 1061: "copypaste: 45.7306,31.2520,52.8373,61.0877,57.9835,..." (then 1062: "iter: 89999")
    "detectron2/bupt-d2-rpn-fpn-backbone-fpn.log": LastValidation(
        "box_proposals/AR@1000", "val", 1, Seen(57.9835, 89999, None, 1061)),
    # grep -c 'eval_loss': 14, the last 107: "eval_results= {'eval_loss': 0.031908828765153885, ..., 'epoch': 10.0}"
    # (the program's own print of trainer.evaluate(): eval_runtime 1.0068, where line 102's was 0.9916)
    "huggingface/eshaubale-hf-trainer-padded.log": LastValidation(
        "loss", "val", 14, Seen(0.031908828765153885, 17, 10.0, 107)),
    # 1048: "{'eval_loss': '0.7206', ..., 'epoch': '3'}"
    "huggingface/llama-sft-trl-tqdm-cr.log": LastValidation("loss", "val", 3, Seen(0.7206, 167, 3.0, 1048)),
    # grep -c val_loss: 300; 689: "... - val_loss: 1.0097 - val_acc: 0.7324"
    "keras/esartic-sound-cnn-30ep.log": LastValidation("loss", "val", 300, Seen(1.0097, 30 * 15825, 30.0, 689)),
    # grep -c val_loss: 33 (the third fit has none); 71: "225s - loss: 0.0448 - ... - val_loss: 0.1035"
    "keras/kanji-keras1-verbose2-50ep.log": LastValidation("loss", "val", 33, Seen(0.1035, None, 14.0, 71)),
    # 55: "3122s - loss: 0.0134 - acc: 0.9962 - val_loss: 0.0740 - val_acc: 0.9848"
    "keras/kanji-keras1-verbose2-earlystop.log": LastValidation("loss", "val", 25, Seen(0.074, None, 6.0, 55)),
    # one "- val_loss:" per epoch; 3151: "49/49 ... - val_accuracy: 0.8505 - val_loss: 0.5300 - learning_rate: 1.2500e-04"
    "keras/keras3-utf16le-ansi.log": LastValidation("loss", "val", 60, Seen(0.53, 60 * 49, 60.0, 3151)),
    # 9 distinct "val_loss=..., val_acc=..." postfixes; 1850: "Epoch 9:  99%|...| 352/356 [...,
    # v_num=ymxl, val_loss=1.800, val_acc=0.322]": epoch 8's validation, at its last batch seen
    "lightning/wandb-lightning-progress.log": LastValidation("loss", "val", 9, Seen(1.8, 8 * 356 + 351, 8.0, 1850)),
    # 97: {"mode": "val", "epoch": 12, "iter": 361, "lr": 3e-05, "bbox_mAP": 0.358, ...}
    "mmdetection/mmdet2-faster-rcnn-12ep-json.log": LastValidation("bbox_mAP", "val", 12, Seen(0.358, 12 * 361, 12.0, 97)),
    # 417: "Epoch [12][361/361]\tlr: 2.500e-05, bbox_mAP: 0.3580, ..."
    "mmdetection/mmdet2-faster-rcnn-12ep.log": LastValidation("bbox_mAP", "val", 12, Seen(0.358, 12 * 361, 12.0, 417)),
    # grep -c Validation-accuracy: 10; 353: "Epoch[9] Validation-accuracy=0.948918"
    "mxnet/ouyangchao-mxnet-cls.log": LastValidation("accuracy", "val", 10, Seen(0.948918, None, 9.0, 353)),
    # 120: "[Epoch 59][Batch 50], ... val_AP=0.614"
    "mxnet/sparks-gluon-ssd.log": LastValidation("AP", "val", 120, Seen(0.614, 50, 59.0, 120)),
    # 3307: "Epoch[299] Validation-accuracy=0.952927"
    "mxnet/tornadomeet-resnet164-cifar10.log": LastValidation("accuracy", "val", 300, Seen(0.952927, None, 299.0, 3307)),
    # 121: the run was restarted after epoch 98's validation (10403), which is printed again (10513);
    # 12718: "Epoch[119] Validation-accuracy=0.692602"
    "mxnet/tornadomeet-resnet18-imagenet.log": LastValidation("accuracy", "val", 121, Seen(0.692602, None, 119.0, 12718)),
    # line 4: "test_loss": 57.89172291870117, ..., "epoch": 3
    "pytorch/detr-log-jsonl.log": LastValidation("loss", "test", 4, Seen(57.89172291870117, None, 3.0, 4)),
    # grep -c 'Test: *\[': 20; 400: "Test:  [3/4] ... loss: 50.3081 (50.7117)", after epoch 9's last
    # training line (396: "Epoch: [9]  [127/128]"): the [3/4] counts test batches, not training steps
    "pytorch/detr-metriclogger-ddp.log": LastValidation("loss", "val", 20, Seen(50.3081, 9 * 128 + 127, 9.0, 400)),
    # 684: "Saving dict for global step 5468: eval_accuracy = ..., eval_loss = 0.7216634, ..."; the
    # "***** Eval results *****" block (687-691) repeats that evaluation and is not a second one
    "tensorflow/bert-similarity-estimator.log": LastValidation("loss", "val", 1, Seen(0.7216634, 5468, None, 684)),
    # results.txt column 12: 100: "99/99 ... 0.5582    0.3633   0.04283"
    "yolo/yolov5-results-mushrooms.log": LastValidation("mAP@.5:.95", "val", 100, Seen(0.3633, None, 99.0, 100)),
    # grep -c '^ *all ': 11 (10 epochs, then the best weights' validation); 116: "all 3796 4416 0.56 0.28 0.247 0.135"
    "yolo/yolov5-stdout-cpu.log": LastValidation("mAP@.5:.95", "val", 11, Seen(0.135, None, 9.0, 116)),
    # the VOC evaluator prints timings only; 2329: "the best AP is 0.00", 5047: "the best AP is 90.00"
    "yolo/yolox-gbk-crlf.log": LastValidation("best_AP", "val", 2, Seen(90.0, 299 * 47 + 40, 300.0, 5047)),
}

# Logs with no validation or test output at all.
NO_VALIDATION = {
    "caffe/ducha-adaadam-libcudart-error.log": "one shell error line",
    "caffe/pycaffe-centerloss-squeezenet.log": "no test net: grep -c 'Testing net' is 0",
    "caffe/pyfrcnn-alt-opt-zf.log": "no test net: grep -c 'Testing net' is 0",
    "darknet/darknet-yolov3-tiny-nan.log": "darknet's detector train prints no validation",
    "pytorch/cifar10-tutorial-pbs.log": "the run ends in a NameError before the test loop (line 22)",
    "tensorflow/xlnet-ner-custom-crlf.log": "the log stops at step 3900, before any evaluation",
}

def test_every_real_log_is_audited():
    assert set(TRAIN_LOSS) | set(NO_TRAIN_LOSS) == set(CHOICES) and not set(TRAIN_LOSS) & set(NO_TRAIN_LOSS)
    assert set(VALIDATION) | set(NO_VALIDATION) == set(CHOICES) and not set(VALIDATION) & set(NO_VALIDATION)


@pytest.mark.parametrize("rel", sorted(TRAIN_LOSS))
def test_training_loss_count_first_and_last(rel):
    _, ev = events_of(rel)
    want = TRAIN_LOSS[rel]
    loss = series(ev, want.name)
    assert (len(loss), seen(loss[0]), seen(loss[-1])) == (want.count, want.first, want.last)


@pytest.mark.parametrize("rel", sorted(NO_TRAIN_LOSS))
def test_logs_without_a_training_loss_get_none(rel):
    _, ev = events_of(rel)
    assert not [m for m in ev if type(m) is Metric and m.phase == "train" and "loss" in m.name.lower()]


@pytest.mark.parametrize("rel", sorted(VALIDATION))
def test_last_validation_value(rel):
    _, ev = events_of(rel)
    want = VALIDATION[rel]
    vals = series(ev, want.name, want.phase)
    # detectron2's evaluation is printed before the writer's line of its iteration ("iter: 89999"): filed there
    assert (len(vals), seen(vals[-1])) == (want.count, want.last)


@pytest.mark.parametrize("rel", sorted(NO_VALIDATION))
def test_logs_without_validation_get_none(rel):
    _, ev = events_of(rel)
    assert not [m for m in ev if type(m) is Metric and m.phase != "train"]


def comparable(metrics, name, phase):
    """(value, step, epoch, line) of one series; values as repr (the live helper's form)."""
    return [(m.value if isinstance(m.value, str) else repr(m.value), m.iteration, m.epoch, m.line)
            for m in metrics if type(m) is Metric and m.name == name and m.phase == phase]


@pytest.mark.parametrize("rel", sorted(TRAIN_LOSS))
def test_live_chunks_give_the_same_losses_and_validation(rel):
    """Bytes in 4093-byte reads through `auto` (a live child) give the replay's loss and validation series."""
    _, ev = events_of(rel)
    live = chunked_events(REAL_LOGS / rel, "auto", 4093)
    checked = [(TRAIN_LOSS[rel].name, "train")]
    if rel in VALIDATION:
        checked.append((VALIDATION[rel].name, VALIDATION[rel].phase))
    for name, phase in checked:
        want = comparable(ev, name, phase)
        assert want and comparable(live, name, phase) == want
