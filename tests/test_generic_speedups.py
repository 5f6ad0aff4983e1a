"""The optional C loop of the generic parser gives exactly the Python loop's events:
on every log the project can read (fixtures, ../shared/real-logs), fed whole and in
pieces, on the corners of its grammar, and on random text."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.events import with_stream
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions
from trainvisor.parsers import generic

from .conftest import FIXTURES, REAL_LOGS
from .parsing_helpers import chunks, feed_pieces

pytestmark = pytest.mark.skipif(generic._c_feed is None, reason="C speedup not built (no compiler at install)")

LOGS = sorted((FIXTURES / "logs").glob("*.log")) + (sorted(REAL_LOGS.glob("*/*.log")) if REAL_LOGS.is_dir() else [])


def events(data: bytes, *, use_c: bool, chunk: int = 65536) -> list:
    parser = generic.GenericParser(ParserOptions(year=2026))
    if not use_c:
        parser._c_feed = None
    out = feed_pieces(parser, chunks(data, chunk), stream="s", wall_time=1.5)
    return [comparable(e) for e in with_stream(out, "s")]  # as the pipeline passes them on


def comparable(m) -> tuple:
    """The fields with their types (an int step is not a float step); NaN equal to NaN."""
    return tuple((type(v).__name__, "nan" if isinstance(v, float) and math.isnan(v) else v) for v in m)


def test_the_c_loop_is_in_use():
    parser = generic.GenericParser(ParserOptions(year=2026))
    assert parser._c_feed is generic._c_feed


@pytest.mark.parametrize("log", LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("chunk", [65536, 97])
def test_c_and_python_loops_agree_on_every_log(log, chunk):
    data = log.read_bytes()
    c_events = events(data, use_c=True, chunk=chunk)
    assert c_events == events(data, use_c=False, chunk=chunk)


# Lines no read_bar form or evaluation table takes, though they hold `/s`, `[0]`, `mAP`, `Evaluat`.
LOOKS_LIKE_A_BAR_OR_TABLE = [
    "I1231 23:58:10.052812  4242 solver.cpp:239] Iteration 50 (4.99978 iter/s, 10.0004s/50 iters), loss = 0.0449\n",
    "INFO:root:Epoch[0] Batch [20]\tSpeed: 512.30 samples/sec\taccuracy=0.112\n",
    "Class Images P R mAP50 mAP50-95 x=1\n", "d2 INFO: Evaluating predictions loss: 0.2\n",
]
# Source locations, which are no pairs (glog, absl, klog and Python logging's ``file.py:NN``), among
# names that only end like one (``.pyc``, ``.hx``, ``.c2``) or hold one inside (``a.py.x``).
SOURCE_LOCATIONS = [
    "I0513 23:27:10.305861 139977807611712 estimator.py:371] loss = 0.25, step = 3\n",
    "I0513 23:27:10.305861 139977807611712 basic_session_run_hooks.py:262] loss = 0.5, step = 4 (0.5 sec)\n",
    "W0102 10:00:00.000001  4242 solver.cpp:239] Iteration 5, loss = 0.3\n", "E0102 10:00:00 1 foo.cc:45] x: 1\n",
    "I0102 main.go:57] acc: 0.5 util.h:12] b: 2 kernel.cu:3 c.cuh=4 d.hpp: 5 e.pyx: 6 f.cxx=7 g.hh=8 h.c: 9\n",
    "INFO train.py:12] acc: 3\n", "x.py: 1 (5)\n", "src/model/x.py:12 y: 1 (6)\n", "INFO x.py: 2 (7)\n",
    "a.pyc: 1 b.hx=2 c.c2: 3 d.py.x: 4 e.cppx=5 .py: 6 py: 7 f.Py: 8 g.ccc=9 h.: 10 i..py: 11 j.-py=12\n",
]
# JSON records (_generic_json.h) read in C, and those it leaves to Python (escapes where text is read,
# duplicate keys, ints over 18 digits, deep nesting, over 256 keys); Katib's records.
JSON_AND_KATIB = [
    '{"step": 3, "loss": 0.5, "mode": "eval", "a": [1, 2.5, true, "3", null, [1], NaN], "b": " 1e-3 ", "time": 4}\n',
    '{"lo\\u0073s": 0.1, "x": 1}\n', '{"time": "a\\nb", "loss": 0.2}\n', '{"note": "a\\tb", "loss": 0.3}\n',
    '{"a": ["x\\"y", {"k\\u00e9\\/": 1}], "loss": 0.4}\n', '{"a": "\\x", "loss": 1}\n', '{"a": "\\u12g4", "l": 1}\n',
    '{"a": ["\\ud800\\udc00", "\\ud800"], "b": 2}\n', '{"a": "\\u123", "b": 2}\n',
    '{"loss": 1, "acc": 2, "loss": 3}\n', '{"mode": "eval", "x": 1, "mode": 3}\n', '{"a": {"b": 1, "b": 2}, "c": 3}\n',
    '{"a": {"b": [1, {"c": null}]}, "d": [[1, 2], 3], "e": {}, "f": []}\n',
    '{"a": ' + "[" * 70 + "]" * 70 + ', "b": 1}\n', '{"a": ' + "[" * 60 + "]" * 60 + ', "b": 1}\n',
    '{"loss": NaN, "a": Infinity, "b": -Infinity, "step": NaN}\n', '{"x": [NaN, -Infinity, Infinity]}\n',
    '{"epoch": Infinity, "iter": -Infinity, "l": 1}\n', '{"loss": nan}\n', '{"loss": -NaN}\n', '{"l": Infinit}\n',
    '{"x": 1234567890123456789, "y": 2}\n', '{"x": 123456789012345678, "step": 99999999999999999, "y": -0}\n',
    '{"x": [1234567890123456789], "y": 3}\n', '{"x": {"y": 1234567890123456789}, "y": 3}\n',
    '{"x": 12345678901234567890e-3, "y": -0.0, "z": 0e5, "w": 1E400, "v": -1.5e-400}\n', '{"x": ' + "7" * 5000 + '}\n',
    '{"x": 01}\n', '{"x": 1.}\n', '{"x": .5}\n', '{"x": 1e}\n', '{"x": +1}\n', '{"x": -}\n', '{"x": 1.5e+}\n',
    '{"a": " 1e-3 ", "b": "1.#INF", "c": " nan", "d": "infinity  ", "e": "1e", "f": "- 1", "g": "+.5", "h": "1.#QNANx"}\n',
    '{"i": "", "j": " ", "k": "Infinit", "m": "1.#IND", "n": "-1.#SNAN0", "o": "5.", "p": "1e+5 x", "q": "\x7f1"}\n',
    '{"phase": "train", "loss": 1}\n', '{"split": "test", "loss": 1, "mode": 1}\n', '{"mode": "validation", "val_x": 2}\n',
    '{"mode": "Val", "loss": 1}\n', '{"mode": "eval ", "loss": 1}\n', '{"mode": "valid", "phase": "train", "l": 2}\n',
    '{"a": [true, false, 1, null, "2", 3.5, NaN, {"b": 1}, -0]}\n', '{"step": [1, 2], "batch": {"x": 1}, "it": null}\n',
    '{"a": [' + ", ".join(["1"] * 64) + ']}\n', '{"a": [' + ", ".join(["1"] * 65) + ']}\n',
    '{"a": 1,}\n', '{"a" 1}\n', "{'a': 1, \"b\": 2}\n", '{"a": 1} {"b": 2}\n', '{"a": 1 "b": 2}\n', '{"a"=1}\n',
    '{"a":\t1 ,\t"b" : [ ] }\n', '  {"a": 1}\t \n', '{"a": tru}\n', '{"a": 1}}\n', '{"a": "b}\n', '{"a"}\n',
    '{"a": 1, "b": {"c": 1,}}\n', '{"a": [1 2]}\n', '{"a": [1,]}\n', '{"a": "x\x01y", "b": 1}\n', '{"a":\x0c1}\n',
    '{"timestamp": [1, 2], "wall_time": "5", "time": {"a": 1}, "l": 1}\n', '{"iter": " 7 ", "loss": 1}\n',
    '{"step": "x", "loss": 1}\n', '{"step": true}\n', '{"epoch": "2.5"}\n', '{"epoch": null, "l": 1}\n',
    '{"Average loss": 1, "Train Loss": 2, "": 3, "a b c": 4, "val_loss": 5}\n', '{"IoU": 0.5, "loss": 1}\n',
    "{" + ", ".join(f'"k{i}": {i}' for i in range(300)) + "}\n", '{"step": 7}\n', '{"x": 1}\n', "step: 9\n",
    '{"y": 2, "epoch": 1}\n', "{metricName: loss, metricValue: 0.3}\n", "{metricName: loss, metricValue: 0.3.1}\n",
    "{metricName: loss, metricValue: 1e}\n", "{metricName: a, metricValue: 1.5}x{metricName: b, metricValue: nan}\n",
    "x {metricName: a-b|c, metricValue: -1.#IND} loss: 5\n", "{metricName: a, metricValue: infinity} {metricName: b,"
    " metricValue: inf}\n", "{metricName: a b, metricValue: 1}\n", "{metricName: , metricValue: 1}\n",
    "{metricName: x, metricValue: +.5e3}" * 70 + "\n", "{metricName: x, metricValue: 1.#QNAN0}{metricName: y, metricValue: 5.}\n",
]


# Progress bars: tqdm's form with "%|" and the Keras 2 form are read in C (non-ASCII in a description
# or a bar too), their postfixes against BarMetrics' state; other forms and every doubt are Python's.
READ_IN_C_BARS = [
    "Epoch 0:  45%|████▌     | 45/100 [00:02<00:03, 19.5it/s, loss=0.231, v_num=0]\n",
    "Epoch 0:  46%|████▌     | 46/100 [00:02<00:03, 19.5it/s, loss=0.231, v_num=0]\n",  # the same postfix: nothing
    "Epoch 0: 100%|██████████| 100/100 [00:05<00:00, 19.5it/s, loss=0.231, v_num=0]\n",  # at its total: again
    "  0%|          | 0/1677 [00:00<?, ?it/s]\n",
    "                 Class     Images  Instances      Box(P          R      mAP50  mAP50-95): 100%|██████████| 4/4 "
    "[00:01<00:00,  3.10it/s]\n",
    "       0/2     1.20G   0.08000   0.05000   0.02000        20       640: 100%|##########| 10/10 [00:05<00:00,  2.00it/s]\n",
    "Epoch 0/2  ━━━━━━━━━━━━━━━━━ 10/10 0:00:00 • 0:00:00 11.89it/s v_num: 0.000     \n",
    "Epoch 3/9 ━━━━━╸━━━━ 25/50 0:00:02 • 0:00:00 25.1it/s v_num: 0 train_loss: 0.231\n",
    "250/250 [==============================] - 3s 10ms/step - loss: 0.5000 - accuracy: 0.8000 - val_loss: 0.4000\n",
]
BAR_LINES = READ_IN_C_BARS + [
    "Epoch 1: 100%|##########| 100/100 [00:05<00:00, 2.11s/it, loss=nan, acc=-inf, x=1.#INF, y=1e5, z=.5]\n",
    "Epoch 1: 100%|##########| 100/100 [00:05<00:00, 2.11s/it, loss=nan, acc=-inf, x=1.#INF, y=1e5, z=.5]\n",  # NaN
    "valid 7%|█| 7 [00:01, a=1, b, c=x, =2, 9x=1, v_num=3, it/s=4,  d = 5 , e=+1.5e-3 , f=1.#QNAN0, g=1.#INF.]\n",
    "valid ━ 7%|█| 7 [00:01, 1.5it/s, b, c=x, v_num=3]\n", "valid ━ 7%|█| 7 [00:01, 1.5it/s, c=1]\n",
    "٣%|█| 1/2 [0, l=1] 5%|#| 1/2 [x, 1/s]\n",  # a Unicode digit opens the first percentage
    "A: 5%|#| 1/20 [t, l=1]\n", "A 5%|#| 1/20 [t, l=1]\n", " A :: 5%|#| 2/20 [t, l=1]\n",  # one description: once
    "Époque\u00a0 5%|#| 1/2 [t, l=1]\n", "Époque 5%|#| 1/2 [t, l=1]\n",  # str.strip takes the no-break space too
    "Époque 2 ▸ 50%|█████     | 5/10 [00:01<00:01, 3.1it/s, loss=0.4]\n", "x٣5%|█| 1/2 [0, l=1]\n", "x5%|█| ٣/4 [0, l=1]\n",
    "7%|█| 3/4\u00a0[x, l=1]\n", "7%|█|\u00a03/4 [x, l=1]\n", "7%|█| 3/4 [x, l=1, m=٣]\n", "5%| |3/[x, l=1] 9%|y| 2/3 [z, l=2]\n",
    "train:  45%|####      | 45/100 [00:02<00:03,  2.00s/it, loss=0.231] 1234%|x| 5/6 [a, q=1]\n", "1234%|x| 5/6 [a, q=2]\n",
    " Epoch [3] : 5%|#| 1/20 [t, l=1]\n", "epoch 99999999999999999999 5%|#| 1/20 [t, l=1]\n", "5%|#| 1/20 [t, l=3] x: 1\n",
    "é poch 5%|#| 1/20 [t]\n", "é 5%|#| 99999999999999999999/20 [t]\n", "Epoch 2 5%|#| 2/20 [t, x=1] 5/10 [00:01<00:02, l=1]\n",
    "Epoch 3/9 ━━━━━━━━━━ 50/50 0:00:02 • 0:00:00 25.1it/s v_num: 0 train_loss: 0.231\n",
    "Epoch 3/9 ━━━━━━━━━━ 50/50 0:00:02 • 0:00:00 25.1it/s v_num: 0 train_loss: 0.231\n",  # the same state: nothing
    "Epoch 4 ━━━━━╸━━━━ 25/50 0:00:02 • 0:00:00 25.1it/s val_loss: nan x: 1. y: 2x z: inf a: 1b: 2 c: 3• t/l: -1e-3\n",
    "━━ ━━ 5/6 1:2•3 a/s/s b: 1\n", "a ━━ x ━━━ 5/6 0:01 • 0:02 1.5s/it loss: 0.5\n", "a ─━ 5/6 0:01 • 0:02 loss: 0.6\n",
    "x ━━ 5/6 0:01 • 0:02 a/sb/itc loss: 1\n", "x ━━ 5/6 0:01 • 0:02 /s q: 2/it r: 3\n", "━━ 5/6 0:01 • 0:02\n",
    "é ━━ 5/6 0:01 • 0:02 1/s a: 1\n", "Epoch 1 ━━ 5/6 0:01 • 0:02 1/s\u00a0a: 1\n", "━━ 5/6 0:01 •\n", "━━ ٣/6 0:01 • 1 a: 1\n",
    "\x1b[35m━━\x1b[0m 1/4 0:00:01 • 0:00:03 25.10it/s v_num: 0 train_loss: 0.693\n", "Epoch 5 ━━ 5/6 0:01 • 0:02  \n",
    "Epoch 99999999999999999999 ━━ 5/6 0:01 • 0:02 1/s a: 1\n", "━━ 5/6 0:01 • 0:02 1/s v_num: 1 ETA: 2 it/s: 3\n",
    "x ━━ 5/6 0:01 • 0:02 1/sx: 2\n", "x ━━ 5/6 0:01 • 0:02 a/sb/sx: 3\n", "x ━━ 5/6 0:01 • 0:02 a/itb/itx: 4\n",  # rates
    "━━ 5/6 0:01 • 0:02 1/s a: 1\u00a0b: 2 cé: 3\n", "━━ 5/6 1:2 x 3 1/s a: 1 •\n",  # Unicode classes; no rich form
    "250/250 [==============================] - 3s 10ms/step - loss: 0.5000 - accuracy: 0.8000 - val_loss: 0.4000\n",
    "  32/100 [=>....] - ETA: 1s - loss: 2.3000 - ETA: 3 - v_num: 1 - x: 1.5e - y: nan - z: 1.#QNAN0 - w: 2. - a/b: 1:\n",
    "15635/15635 [==============================] - 8s 500us/step - loss: 0.9278\n", "3/4 [==] - 1s 1.5.2s/step - a: 1\n",
    "3/4 [==] 1s - a: 1\n", "3/4 [==] - 1sec - a: 1\n", "3/4 [= =] - 1s - a: 1\n", "3/4 ========== 1s 10ms/step - a: 1\n",
    "50/50 ━━━━━━━━━━ 1s 10ms/step - accuracy: 0.91 - loss: 0.23\n", "3/4 [==] - 1s 10ms/step   \n", "3/4 [==] - 1s-a: 1\n",
    "99999999999999999999/3 [==] - 1s - a: 1\n", "3/4 [==] - 1s 0." + "0" * 320 + "1us/step - loss: 1\n",
    "3/4 [==] - ETA: - a: 1\n", "3/4 [==] - 2ms 1us/step - a: 1 - b: 2 - c:  3 -  d: 4 --e: 5 - f: 6x - g: 7.\n",
    "3/4 [==] - 2ms 1us/step - h: 5.. - i: 1e5. - j: inf. - k: 1.#INF. - l: 2:\n",
]
CORNERS = [
    "loss: 0.5\n",  # starts the training: every corner below is read by the C loop
    "a=1.#INF b=1.#INF: c=-1.#QNAN0 d=1.#IND\n",  # a failed Windows spelling falls back to "1."
    "e=5/10 f=5/10x g=5/x h=1e5. i=1e5 j=1.e5 k=.5 l=5. m=5.: n=1e+ o=+3 p=-.5e-3\n",
    "q: nan r: -inf s: Infinity t: infinit u: NaNx v=INF\n",
    "Average loss: 0.3 Train Loss = 0.2 lr/group.0: 1e-3 mAP@.5 = 0.4 w@x=1 -y=2 .z=3 /u=4\n",
    "x: 1.1 (10)\n", "y: 2 (step 12)  \n", "z: 3 (step x)\n", "z: 4 (12) tail\n", "z: 5 ( 12)\n",
    "step: 20\n", "acc: 0.9\n", "epoch: 3\n", "step: nan epoch: 4\n", "val_acc: 0.8\n",
    "global_step=7 loss=0.1\n", "Step 9: iter: 100/2000 batch: 5 it: 3 Iteration: 4\n",
    "step: 1e20 loss: 0.1\n", "x: 99999999999999999999 (123456789012345678901234)\n",
    " ".join(f"k{i}={i}" for i in range(70)) + "\n",  # more pairs than the C loop takes
    "sep:\t0.5\x1c\n", "a\x1f=\x1f1\n",
    '{"step": 3, "loss": 0.5}\n', '{"a": [1, 2.5, true, "3", null], "mode": "eval", "time": 3, "b": " 1e-3 ", "c": false}\n',
    '{"global_step": 1e999, "x": ' + "9" * 400 + ', "epoch": "2", "y": {"z": 1}}\n', "  all  128  929  0.716  0.604  0.681  0.453\n",
    "Evaluation results for bbox:\n", "|   AP   |  AP50  |\n", "|:------:|:------:|\n", "| 35.1 | 55.2 |\n",
    "after: 1\n", "the best AP is 90.00 loss: 0.2\n", "{metricName: loss, metricValue: 0.3}\n",
    "température: 0.5 loss: 0.4\n", "IoU=0.5 loss: 0.3\n",
    # pycocotools summaries, read by the C loop too: names, the title's prefix, odd spellings
    " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.002\n",
    "IoU metric: segm\n",
    " Average Precision  (AP) @[ IoU=0.50      | area=   all | maxDets=100 ] = -1.000\n",
    " Average Precision  (AP) @[ IoU=0.75      | area= small | maxDets=100 ] = 1.#QNAN\n",
    " Average Recall     (AR) @[ IoU=0.50:0.95 | area=   all | maxDets= 10 ] = nan\n",
    " Average Recall     (AR) @[ IoU=0.5 | area=large | maxDets=1 ]=0.3 loss: 0.2\n",  # no "] = ": pairs
    "x Average Recall (AR) @[ IoU=0.60 | area=medium | maxDets=1 ] = 5e-1x y=2\n",
    "Average Precision(AP) @[ IoU=0.5 | area=all | maxDets=1 ] = 0.1 Average Recall (AR) @[ IoU=.9 | area=a_1"
    " | maxDets=7 ] = +.5\n",
    " Average Precision  (AX) @[ IoU=0.50 | area= all | maxDets=100 ] = 0.4 acc: 0.9\n",
    "Evaluate annotation type *bbox*\n",
    " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.25\n",
    # evaluation tables, read by the C loop too: markdown tables interrupted, of another width, with nan
    # or non-number cells, ended by a line Python reads, named or continued by Python's lines
    "Evaluation results for segm:  \t\n", "  | AP | APs |  \n", "loss: 0.1\n", "| 1 | 2 |\n",
    "Evaluation results for bbox:\n", "|AP|AP50|APl|\n", "|:-:|:-:|:-:|\n", "| 1 | 2 |\n",
    "Evaluation results for segm:\n", "| AP | AP50 |\n", "|:---:|:---:|\n", "| nan | -inf |\n",
    "Evaluation results for keypoints:\n", "| AP | AP50 |\n", "|---|\n", "| 1.5 | - |\n",
    "Evaluation results for a_1:\n", "|\n", "||\n", "| 7 |\n",
    "Evaluation results for bbox:\n", '{"bbox_mAP": 0.5, "loss": 0.1}\n', "Evaluation results for bbox:\n", "| AP |\n", "| é |\n", "| 3 |\n",
    "Evaluation results for bōx:\n", "| AP |\n", "|:-:|\n", "| 4 |\n",
    # titles with trailing text (names or not), mmdetection's forms, best AP, `all` rows
    "IoU metric: bbox trailing text\n", "Evaluate annotation type *segm* done\n", "IoU metric: bbox ] = 2\n",
    "Evaluation results for coco_val in csv format:\n", "Evaluation results for bbox: x=1\n", "IoU metric: keypoints\n",
    "{'bbox_mAP': 0.358, 'bbox_mAP_50': 0.571, 'bbox_mAP_copypaste': 0.358 0.571, 'segm_mAP_l': nan}\n",
    "OrderedDict([('segm_mAP', 0.312)])\n", "coco/bbox_mAP: 1e-3 xbbox_mAP=2 a/b/segm_mAP, -.5 loss: 0.3\n",
    "bbox_mAP_copypaste: 0.3\n", "bbox_mAP: 0.3. proposal_mAP\"=1.#INF. segm_mAP= 1.#QNAN x\n",
    "the best AP is 1.#QNAN\n", "best AP is x, best AP is -3e2 acc: 0.1\n", "best AP is -\n",
    "all 10 20 0.5 0.6 0.7 0.8 0.9\n", "  all 1 2 .5 nan 1.#INF +3  \n", "all\t1 2 3 4 5 6\n", "all 1 2 1. 2e 3 4\n",
    # what only looks like a bar or a table stays in the C loop; what read_bar or tables.read may read does not
    *LOOKS_LIKE_A_BAR_OR_TABLE,
    *SOURCE_LOCATIONS,
    "Evaluation results for bbox: loss=1\n", "Evaluate annotation type *segm* x=1\n", "a_mAP: 0.3 b=2\n",
    "x 5/10 [00:01<00:02, 3.1it/s, loss=0.5]\n", "y: 5it [00:01, 3.0it/s, acc=1]\n", "z [00:0<x, 1/s w=2\n",
    "3/4 1s 10ms/step - loss: 0.2\n", "q [1:2<3?, 1/s] v=4\n", "r [12, 1/s] u=5\n", "  7/8 [==>.] - ETA: 1s - l: 2\n",
    *JSON_AND_KATIB,
    *BAR_LINES,
]


@pytest.mark.parametrize("chunk", [1, 5, 65536])
def test_the_corners_of_the_grammar_agree(chunk):
    data = "".join(CORNERS).encode()
    c_events = events(data, use_c=True, chunk=chunk)
    assert len(c_events) > 100
    assert c_events == events(data, use_c=False, chunk=chunk)


def test_a_step_in_parentheses_sets_the_step_in_both_loops():
    data = "loss: 0.5\nx: 1.1 (10)\ny: 2\n".encode()
    got = events(data, use_c=True)
    assert [(m[0][1], m[2][1]) for m in got] == [("loss", None), ("x", 10), ("y", 10)]


ALPHABET = st.sampled_from(list("ab_Lsteporch:= ./-@#()[]\t1059eE+-nNaIiFfQ{}\"|") + [
    "step", "epoch", "loss", "IoU", "mAP", "all ", "1.#INF", "nan", "inf", "(step ", "\n", "é", "metricName",
    "Average Precision (AP) @[ IoU=", "Average Recall  (AR) @[", "IoU=0.50:0.95", " | area=", "small", "| maxDets=",
    "] = ", "IoU metric: ", "iter/s", "/s", "/it", "%|", "[00:01<00:02, ", "[0:1, ", "_mAP", "Evaluating ",
    "Evaluation results for ", "Evaluate annotation type *", "] - ", "3/4 ", "| ", "|:---:|", "Evaluation results for bbox:",
    "bbox_mAP", "_copypaste", "best AP is ", "OrderedDict([('segm_mAP', ", "all 1 2 ", "IoU metric: bbox", "'", ",",
    '{"', '": ', ", ", '"mode": "eval"', '"step": ', '"time": ', '"a": ', "NaN", "Infinity", "-Infinity", "true", "null",
    "\\", "\\u00e9", '\\"', "12345678901234567890", "-0", " 1e-3 ", "[1, true, 2.5]", "{metricName: ", ", metricValue: ",
    "█", "━", "•", "٣", "\u00a0", "Epoch ", "5%|", "| 3/4 [", "00:01<00:02, ", "?it/s", "s/it", "1.5it/s", ", loss=", "v_num=",
    "[==>.]", " - 1s 10ms/step", " - ETA: ", " - loss: ", "ms/step", "=nan", ": nan",
    ".py", ".cc", ".cpp", ".h", ".c", ".pyx", ".go", "estimator.py:371] ", "I0513 23:27:10.305861 1 x.py:9] "])


@settings(max_examples=300, deadline=None)
@given(st.lists(ALPHABET, max_size=120), st.integers(min_value=1, max_value=40))
def test_random_text_agrees(pieces, chunk):
    data = ("loss: 0.5\n" + "".join(pieces) + "\n").encode()
    assert events(data, use_c=True, chunk=chunk) == events(data, use_c=False, chunk=chunk)


def test_lines_that_only_look_like_bars_or_tables_are_read_in_c():
    """Caffe's ``(4.99 iter/s, ...)``, MXNet's ``Epoch[0] ... samples/sec``, a ``mAP50`` header
    and a d2 ``Evaluating ...`` line go to no Python: no read_bar form or table takes them."""
    parser = generic.GenericParser(ParserOptions(year=2026))
    handed = []
    python_line = parser._env.line
    parser._env = parser._env._replace(line=lambda t, n, w: handed.append(t) or python_line(t, n, w))
    data = "".join(["loss: 0.5\n"] + LOOKS_LIKE_A_BAR_OR_TABLE).encode()
    sp = LineSplitter("s")
    got = parser.feed(sp.feed(data, 0.0, 1.5))
    assert handed == ["loss: 0.5"]
    assert [(m.name, m.value, m.line) for m in got] == [
        ("loss", 0.5, 1), ("loss", 0.0449, 2), ("Speed", 512.3, 3), ("accuracy", 0.112, 3),  # solver.cpp:239] is no metric
        ("x", 1.0, 4), ("loss", 0.2, 5)]


def test_source_locations_are_no_metrics_in_either_loop():
    """``estimator.py:371]``, ``solver.cpp:239]``, ``main.go:57]``, ``x.py: 1 (5)``: no metric, no step
    from a parenthesis after one; the pairs after them are read, and names that only look like a
    source file's are metrics."""
    data = "".join(["loss: 0.5\n"] + SOURCE_LOCATIONS).encode()
    got = events(data, use_c=True)
    assert got == events(data, use_c=False)
    assert [(m[0][1], m[1][1], m[2][1]) for m in got] == [
        ("loss", 0.5, None), ("loss", 0.25, 3), ("loss", 0.5, 4), ("loss", 0.3, None), ("x", 1.0, None),
        ("acc", 0.5, None), ("b", 2.0, None), ("acc", 3.0, None), ("y", 1.0, None),
        ("a.pyc", 1.0, None), ("b.hx", 2.0, None), ("c.c2", 3.0, None), ("d.py.x", 4.0, None), ("e.cppx", 5.0, None),
        ("py", 7.0, None), ("f.Py", 8.0, None), ("g.ccc", 9.0, None), ("h.", 10.0, None), ("j.-py", 12.0, None)]


def test_every_event_says_the_blocks_stream():
    """The C loop's metrics and those of the lines it hands to Python (the first, before training
    starts; a JSON record with an escape) carry the block's stream, and so do the pure Python loop's:
    the pipeline need not copy them (stamps_stream)."""
    data = b'loss: 0.5\nloss: 0.4\n{"lo\\u0073s": 0.3}\nloss: 0.2\n'
    for use_c in (True, False):
        parser = generic.GenericParser(ParserOptions(year=2026))
        if not use_c:
            parser._c_feed = None
        got = parser.feed(LineSplitter("stderr").feed(data, 0.0, 1.5))
        assert [(m.value, m.stream) for m in got] == [(0.5, "stderr"), (0.4, "stderr"), (0.3, "stderr"), (0.2, "stderr")]
    assert generic.GenericParser.stamps_stream


def handing_parser() -> tuple:
    """A generic parser and the list of the lines its C loop hands to Python."""
    parser = generic.GenericParser(ParserOptions(year=2026))
    handed = []
    python_line = parser._env.line
    parser._env = parser._env._replace(line=lambda t, n, w: handed.append(t) or python_line(t, n, w))
    return parser, handed


def test_evaluation_tables_are_read_in_c():
    """Titles, markdown tables, pycocotools summaries, mmdetection's values, best AP and `all`
    rows go to no Python once training has started; their metrics are `val` at the last step."""
    parser, handed = handing_parser()
    data = "".join([
        "step: 7 loss: 0.5\n", "IoU metric: segm\n",
        " Average Precision  (AP) @[ IoU=0.50:0.95 | area=   all | maxDets=100 ] = 0.25\n",
        "[d2] INFO: Evaluation results for bbox: \n", "|   AP   |  AP50  |\n", "|:------:|:------:|\n", "| 35.1 |  nan   |\n",
        "{'bbox_mAP': 0.358, 'bbox_mAP_copypaste': 0.358}\n", "OrderedDict([('segm_mAP', 0.312)])\n",
        "the best AP is 90.00\n", "  all  128  929  0.716  0.604  0.681  0.453\n"]).encode()
    got = parser.feed(LineSplitter("s").feed(data, 0.0, 1.5))
    assert handed == ["step: 7 loss: 0.5"]
    assert [(m.name, m.value if m.value == m.value else "nan", m.iteration, m.phase, m.line) for m in got[1:]] == [
        ("segm/AP", 0.25, 7, "val", 3), ("bbox/AP", 35.1, 7, "val", 7), ("bbox/AP50", "nan", 7, "val", 7),
        ("bbox_mAP", 0.358, 7, "val", 8), ("segm_mAP", 0.312, 7, "val", 9), ("best_AP", 90.0, 7, "val", 10),
        ("P", 0.716, 7, "val", 11), ("R", 0.604, 7, "val", 11), ("mAP50", 0.681, 7, "val", 11),
        ("mAP50-95", 0.453, 7, "val", 11)]


def test_a_table_goes_on_across_python_lines_and_blocks():
    """The table being read is the parser's EvalTables, whichever loop reads its lines: a title
    Python read (non-ASCII), a header Python read, the rule and row in C, one
    block each; and a table the C loop opened, continued by Python and ended in C by a line of pairs."""
    parser, handed = handing_parser()
    sp = LineSplitter("s")
    lines = ["loss: 0.5\n", "Evaluation results for bōx:\n", "| AP | é |\n", "|:-:|:-:|\n", "| 1 | 2 |\n",
             "Evaluation results for segm:\n", "| AP | é |\n", "|:-:|:-:|\n", "acc: 0.9\n", "| 3 | 4 |\n"]
    got = [m for line in lines for m in parser.feed(sp.feed(line.encode(), 0.0, 1.5))]
    assert handed == ["loss: 0.5", "Evaluation results for bōx:", "| AP | é |", "| AP | é |"]
    assert [(m.name, m.value) for m in got] == [("loss", 0.5), ("bōx/AP", 1.0), ("bōx/é", 2.0), ("acc", 0.9)]
    assert events("".join(lines).encode(), use_c=True, chunk=1) == events("".join(lines).encode(), use_c=False, chunk=1)


# JSON records as json.dumps writes them: the keys `_json` treats apart, every kind of value.
JSON_KEYS = st.sampled_from(["step", "iter", "epoch", "Epoch", "mode", "phase", "split", "time", "timestamp", "loss",
                             "val_acc", "Train Loss", "a b", "x/y", "", "é"])
JSON_SCALARS = (st.integers(min_value=-10**25, max_value=10**25) | st.floats() | st.booleans() | st.none()
                | st.sampled_from(["val", "eval", "test", "train", "Val", " 1e-3 ", "nan", "1.#INF", "2", "x", "a\nb"]))
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=70) | st.dictionaries(JSON_KEYS, inner),
                           max_leaves=80)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.tuples(JSON_KEYS, JSON_VALUES), max_size=8), max_size=4), st.integers(1, 40))
def test_json_records_agree(records, chunk):
    """Duplicate keys, escapes (`\\n`, `é` as `\\u00e9`), huge ints, NaN and lists of bools included."""
    lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in rec) + "}" for rec in records]
    data = ("loss: 0.5\n" + "\n".join(lines) + "\n").encode()
    assert events(data, use_c=True, chunk=chunk) == events(data, use_c=False, chunk=chunk)


def test_records_of_held_names_agree():
    """A Katib record printing a held name again is Python's (the held value is reported then);
    a JSON record is never held, nor does it report held values."""
    data = ("lr: 0.1\nwd: 0.5\nloss: 0.5\n{metricName: lr, metricValue: 0.2}\n{metricName: wd, metricValue: 0.5}\n"
            '{"wd": 0.7, "lr": 0.3}\n{metricName: wd, metricValue: 0.7}\n').encode()
    got = events(data, use_c=True)
    assert got == events(data, use_c=False)
    assert [(m[0][1], m[1][1]) for m in got] == [("loss", 0.5), ("lr", 0.1), ("lr", 0.2), ("wd", 0.5), ("wd", 0.7),
                                                 ("lr", 0.3), ("wd", 0.5), ("wd", 0.7)]


def test_json_and_katib_records_are_read_in_c():
    parser, handed = handing_parser()
    data = ('loss: 0.5\n{"step": 3, "mode": "eval", "loss": "0.25", "a": [1, true, 2]}\n{"x": 1,}\n'
            "step: 5\n{metricName: acc, metricValue: 0.9};{metricName: loss, metricValue: 0.1}\n").encode()
    got = parser.feed(LineSplitter("s").feed(data, 0.0, 1.5))
    assert handed == ["loss: 0.5"]
    assert [(m.name, m.value, m.iteration, m.phase) for m in got] == [
        ("loss", 0.5, None, "train"), ("loss", 0.25, 3, "val"), ("a/0", 1.0, 3, "val"), ("a/2", 2.0, 3, "val"),
        ("acc", 0.9, 5, "train"), ("loss", 0.1, 5, "train")]


JSON_TOKENS = st.sampled_from(['"a"', '"step"', '"mode"', '"eval"', ":", ",", " ", "[", "]", "{", "}", "1", "-", "0", ".",
                               "e", "5", "NaN", "Infinity", "true", "null", '"', "\\", "u", "\t", '"1.#INF"', '" 2 "'])


@settings(max_examples=300, deadline=None)
@given(st.lists(JSON_TOKENS, max_size=30))
def test_text_between_braces_agrees(tokens):
    """What json.loads refuses gives nothing in both loops, and no pairs."""
    data = ("loss: 0.5\n{" + "".join(tokens) + "}\n").encode()
    assert events(data, use_c=True) == events(data, use_c=False)


@pytest.mark.parametrize("line", ["é Epoch " + "9" * 5000 + " 5%|#| 1/2 [t, 1/s]", "é 5%|#| " + "9" * 5000 + "/2 [t, 1/s]"])
def test_a_bar_whose_numbers_int_refuses_fails_in_both_loops(line):
    """int() takes at most 4300 digits: such a bar is Python's in the C loop too, and fails alike."""
    data = ("loss: 0.5\n" + line + "\n").encode()
    for use_c in (True, False):
        with pytest.raises(ValueError, match="digits"):
            events(data, use_c=use_c)


def test_progress_bars_are_read_in_c():
    """tqdm's "%|" form (█ bars, a non-ASCII description), rich's and Keras 2 lines go to no Python, their
    postfixes once per change as BarMetrics reports them."""
    parser, handed = handing_parser()
    got = parser.feed(LineSplitter("s").feed("".join(["loss: 0.5\n"] + READ_IN_C_BARS).encode(), 0.0, 1.5))
    assert handed == ["loss: 0.5"]
    assert [(m.name, m.value, m.iteration, m.phase, m.epoch, m.line, m.running) for m in got] == [
        ("loss", 0.5, None, "train", None, 1, False),
        ("loss", 0.231, 45, "train", 0.0, 2, True), ("loss", 0.231, 100, "train", 0.0, 4, False),
        ("loss", 0.231, 25, "train", 3.0, 9, True),
        ("loss", 0.5, 250, "train", None, 10, False), ("accuracy", 0.8, 250, "train", None, 10, False),
        ("loss", 0.4, 250, "val", None, 10, False)]
