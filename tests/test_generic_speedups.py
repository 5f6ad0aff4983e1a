"""The optional C loop of the generic parser gives exactly the Python loop's events:
on every log the project can read (fixtures, ../shared/real-logs), fed whole and in
pieces, on the corners of its grammar, and on random text."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from trainvisor.events import with_stream
from trainvisor.lines import LineSplitter
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
    # what only looks like a bar or a table stays in the C loop; what read_bar or tables.read may read does not
    *LOOKS_LIKE_A_BAR_OR_TABLE,
    "Evaluation results for bbox: loss=1\n", "Evaluate annotation type *segm* x=1\n", "a_mAP: 0.3 b=2\n",
    "x 5/10 [00:01<00:02, 3.1it/s, loss=0.5]\n", "y: 5it [00:01, 3.0it/s, acc=1]\n", "z [00:0<x, 1/s w=2\n",
    "3/4 1s 10ms/step - loss: 0.2\n", "q [1:2<3?, 1/s] v=4\n", "r [12, 1/s] u=5\n", "  7/8 [==>.] - ETA: 1s - l: 2\n",
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
    "Evaluation results for ", "Evaluate annotation type *", "] - ", "3/4 ",
    "█", "━", "•", "٣", "\u00a0", "Epoch ", "5%|", "| 3/4 [", "00:01<00:02, ", "?it/s", "s/it", "1.5it/s", ", loss=", "v_num=",
    "[==>.]", " - 1s 10ms/step", " - ETA: ", " - loss: ", "ms/step", "=nan", ": nan"])


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
        ("loss", 0.5, 1), ("solver.cpp", 239.0, 2), ("loss", 0.0449, 2), ("Speed", 512.3, 3), ("accuracy", 0.112, 3),
        ("x", 1.0, 4), ("loss", 0.2, 5)]


def test_the_c_loop_writes_the_blocks_stream():
    """Its metrics carry the block's stream already (the pipeline need not copy them); the lines it
    hands to Python give "stdout", as every parser's, until the pipeline writes the stream."""
    parser = generic.GenericParser(ParserOptions(year=2026))
    got = parser.feed(LineSplitter("stderr").feed(b"loss: 0.5\nloss: 0.4\n{\"loss\": 0.3}\nloss: 0.2\n", 0.0, 1.5))
    assert [(m.value, m.stream) for m in got] == [(0.5, "stdout"), (0.4, "stderr"), (0.3, "stdout"), (0.2, "stderr")]
    assert {m.stream for m in with_stream(got, "stderr")} == {"stderr"}


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
    parser = generic.GenericParser(ParserOptions(year=2026))
    handed = []
    python_line = parser._env.line
    parser._env = parser._env._replace(line=lambda t, n, w: handed.append(t) or python_line(t, n, w))
    got = parser.feed(LineSplitter("s").feed("".join(["loss: 0.5\n"] + READ_IN_C_BARS).encode(), 0.0, 1.5))
    assert handed == ["loss: 0.5"]
    assert [(m.name, m.value, m.iteration, m.phase, m.epoch, m.line, m.running) for m in got] == [
        ("loss", 0.5, None, "train", None, 1, False),
        ("loss", 0.231, 45, "train", 0.0, 2, True), ("loss", 0.231, 100, "train", 0.0, 4, False),
        ("loss", 0.231, 25, "train", 3.0, 9, True),
        ("loss", 0.5, 250, "train", None, 10, False), ("accuracy", 0.8, 250, "train", None, 10, False),
        ("loss", 0.4, 250, "val", None, 10, False)]
