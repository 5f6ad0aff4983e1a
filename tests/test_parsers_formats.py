"""Each format parser on a small project-written log (fixtures/logs/), and auto's choice logic."""
from __future__ import annotations

import io
import logging
import math

import pytest

from trainvisor.events import Metric
from trainvisor.stream.lines import LineSplitter
from trainvisor.parsers import ParserOptions, available_parsers, create_parser
from trainvisor.parsers.auto import WINDOW, AutoParser, choose_by_argv
from trainvisor.parsers.common import NameTable, to_float
from trainvisor.stream.encoding import Transcoder, detect_encoding, open_log_bytes

from .parsing_helpers import FIXTURES, REAL_LOGS, parse_file, parse_text, series

FORMATS = ["darknet", "detectron2", "generic", "huggingface", "keras", "lightning", "mmdet", "mxnet",
           "pytorch", "tensorflow", "yolo"]


def tuples(events):
    """Comparable rows: NaN written as the string 'nan' so equal streams compare equal."""
    return [e._replace(value=repr(e.value))[:7] if type(e) is Metric else (e.path, e.kind, e.iteration, e.epoch)
            for e in events]


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_picks_each_format_on_its_fixture(fmt):
    parser, events = parse_file(FIXTURES / f"{fmt}.log", "auto")
    assert parser.chosen == fmt
    _, direct = parse_file(FIXTURES / f"{fmt}.log", fmt)
    assert tuples(events) == tuples(direct) and events


def test_every_registered_parser_has_a_fixture_and_a_description():
    names = dict(available_parsers())
    assert set(FORMATS) | {"auto", "caffe"} == set(names)
    assert all(names[n] and "\n" not in names[n] for n in names)


EXPECTED = {
    "mxnet": [("cross-entropy", math.nan, 40, "train", None, None, 0.0), ("model/mnist-0001.params", "params", None, 1.0),
              ("accuracy", 0.301, None, "val", None, None, 0.0)],
    "keras": [("loss", 0.35, 500, "val", None, None, 2.0), ("accuracy", 0.87, 500, "val", None, None, 2.0)],
    "huggingface": [("loss", math.nan, 2, "train", None, None, 0.2), ("grad_norm", math.inf, 2, "train", None, None, 0.2),
                    ("accuracy", 0.88, 2, "val", None, None, 0.2)],
    # the "Epoch 1" bar shows the results of epoch 0 (step 9) still: Lightning files them there
    "lightning": [("loss", 0.55, 9, "val", None, None, 0.0), ("acc", 0.7, 9, "val", None, None, 0.0)],
    "pytorch": [("loss", 1.8231, 640, "train", None, None, 1.0), ("loss", 0.1034, 60000, "test", None, None, 1.0),
                ("accuracy", 0.9672, 60000, "test", None, None, 1.0),  # the program's word, at the epoch's end
                ("loss", 3.105, 3 * 390 + 100, "train", None, None, 3.0), ("lr", 1e-03, 1270, "train", None, None, 3.0),
                ("acc@1", 75.0, 1270, "val", None, None, 3.0)],  # timm; [78/78] counts test batches: at the training step
    "detectron2": [("output/model_0000999.pth", "pth", 999, None), ("bbox/AP", 30.1, 999, "val", None, None, None)],
    "mmdet": [("loss", 0.7, 50, "train", None, None, 1.0), ("/data/work_dirs/faster_rcnn/epoch_1.pth", "pth", None, 1.0),
              ("coco/bbox_mAP", 0.3, 100, "val", None, None, 1.0)],
    "yolo": [("mAP@.5:.95", 0.2, None, "val", None, None, 0.0), ("total_loss", 10.7, 10, "train", None, None, 1.0),
             ("dfl_loss", 1.111, None, "train", None, None, 1.0), ("mAP50-95", 0.452, None, "val", None, None, 1.0)],
    "darknet": [("region16/avg_iou", math.nan, None, "train", None, None, None), ("loss", math.nan, 2, "train", None, None, None),
                ("backup/yolov3_100.weights", "weights", 2, None)],
    "tensorflow": [("loss", 0.6931, 1, "train", None, None, None), ("/tmp/model/model.ckpt-100", "ckpt", 100, None),
                   ("accuracy", 0.91, 100, "val", None, None, None)],
    "generic": [("lr", 1e-05, 10, "train", None, None, None), ("loss", math.nan, 20, "train", None, None, 1.0),
                ("loss", math.inf, None, "train", None, None, None), ("loss", 0.3, 30, "val", None, None, None)],
}


def _same(a, b):
    if len(b) == 7:  # a metric row: the value was written as repr()
        b = b[:1] + (float(b[1]),) + b[2:]
    return len(a) == len(b) and all(
        (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)) or x == y
        for x, y in zip(a, b))


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_fixture_yields_the_values_written_in_it(fmt):
    _, events = parse_file(FIXTURES / f"{fmt}.log", fmt)
    got = tuples(events)
    for want in EXPECTED[fmt]:
        assert any(_same(want, g) for g in got), (want, got)


def test_tensorflow_absl_duplicate_is_not_counted_twice():
    _, events = parse_file(FIXTURES / "tensorflow.log", "tensorflow")
    assert len(series(events, "loss")) == 1


def test_generic_names_the_metric_not_the_output_index_and_keeps_nan():
    events = parse_text("Train net output #1: loss = nan\n", "generic")
    assert [(m.name, math.isnan(m.value)) for m in events] == [("loss", True)]


@pytest.mark.parametrize("text,value", [
    ("4.1066e-005", 4.1066e-05), ("-nan", math.nan), ("1.#QNAN", math.nan), ("-1.#IND", math.nan),
    ("1.#INF", math.inf), ("-inf", -math.inf), ("'2.5'", 2.5), ("Infinity", math.inf), ("abc", None),
])
def test_number_spellings_of_every_platform(text, value):
    got = to_float(text)
    assert (got is None and value is None) or (math.isnan(value) and math.isnan(got)) or got == value


def test_name_table_stays_bounded_with_thousands_of_metric_names():
    table = NameTable(limit=100)
    for i in range(10_000):
        assert table(f"val_ap_class{i}") == (f"ap_class{i}", "val")
    assert len(table) <= 100


def test_many_distinct_metric_names_parse_with_bounded_parser_state():
    parser = create_parser("keras")
    line = " - ".join(["1/1 [==] 1s"] + [f"m{i}: {i}.5" for i in range(5000)]) + "\n"
    sp = LineSplitter("t")
    block = sp.feed(line.encode() * 3, 0.0, 0.0)
    assert len(parser.feed(block)) == 15000
    assert len(parser._names) <= 4096


# -- auto ---------------------------------------------------------------------

@pytest.mark.parametrize("argv,name", [
    (["caffe", "train", "--solver", "s.prototxt"], "caffe"),
    (["/opt/caffe/build/tools/caffe.bin", "train"], "caffe"),
    (["./darknet", "detector", "train", "a.data"], "darknet"),
    (["yolo", "detect", "train"], "yolo"),
])
def test_auto_chooses_from_the_command_line(argv, name):
    parser = create_parser("auto", ParserOptions(argv=argv))
    assert parser.chosen == name and "command line" in parser.reason


def test_python_command_tells_nothing():
    assert choose_by_argv(["python", "train.py", "--epochs", "3"]) is None


def test_auto_after_choosing_delegates_feed_directly():
    parser = create_parser("auto", ParserOptions(argv=["caffe", "train"]))
    assert parser.feed.__self__ is parser._delegate


def test_auto_logs_its_choice_and_reason(caplog):
    with caplog.at_level(logging.INFO, logger="trainvisor.parsers.auto"):
        parser, _ = parse_file(FIXTURES / "keras.log", "auto")
    assert any("chose keras" in r.getMessage() and "signature lines" in r.getMessage() for r in caplog.records)
    assert "keras" in parser.reason


def test_auto_holds_early_lines_and_loses_none_of_them():
    preamble = "".join(f"loading shard {i}\n" for i in range(40))
    text = preamble + (FIXTURES / "mxnet.log").read_text()
    events = _feed_in_lines(text, "auto")
    direct = _feed_in_lines(text, "mxnet")
    assert tuples(events) == tuples(direct) and len(events) == 10


def _feed_in_lines(text: str, name: str, parser=None):
    parser = parser or create_parser(name)
    sp = LineSplitter("t")
    out = []
    for line in text.splitlines(keepends=True):
        block = sp.feed(line.encode(), 0.0, 0.0)
        if block is not None:
            out.extend(parser.feed(block))
    out.extend(parser.finish())
    return out


def test_auto_switches_once_from_generic_to_a_late_format():
    noise = "".join(f"warmup: {i}\n" for i in range(WINDOW + 10))
    text = noise + (FIXTURES / "keras.log").read_text() + (FIXTURES / "mxnet.log").read_text()
    parser = AutoParser(ParserOptions())
    events = _feed_in_lines(text, "auto", parser)
    assert parser.chosen == "keras" and parser.switched
    assert "switched from generic at line" in parser.reason
    assert len(series(events, "warmup")) == WINDOW + 10  # generic's values before the switch are kept
    assert [m.value for m in series(events, "loss", "val")] == [0.4, 0.35]
    # switched once: the later MXNet lines are not re-detected
    assert not series(events, "samples_per_sec")


def test_auto_with_no_known_format_uses_generic_at_the_end_of_a_short_log():
    parser = AutoParser(ParserOptions())
    events = _feed_in_lines("step=1 loss=0.5\nstep=2 loss=0.25\n", "auto", parser)
    assert parser.chosen == "generic"
    assert [(m.iteration, m.value) for m in series(events, "loss")] == [(1, 0.5), (2, 0.25)]


# -- encodings ------------------------------------------------------------------

def test_utf16_with_and_without_bom_and_gb18030_are_detected():
    text = "Epoch 1/2\n 1/1 - loss: 0.5\n训练 完成\n"
    assert detect_encoding(text.encode("utf-16")) == "utf-16"
    assert detect_encoding(text.encode("utf-16-le")) == "utf-16-le"
    assert detect_encoding(text.encode("utf-16-be")) == "utf-16-be"
    assert detect_encoding(("loss: 1\n" + text).encode("gb18030")) == "gb18030"
    assert detect_encoding(text.encode("utf-8")) is None


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096])
def test_transcoder_gives_the_same_text_whatever_the_chunking(chunk):
    text = "Epoch 1/2 训练 ━━ loss: 0.5\r\n" * 50
    raw = text.encode("utf-16")
    t = Transcoder(io.BytesIO(raw), "utf-16")
    out = b""
    while True:
        data = t.read(chunk)
        if not data:
            break
        out += data
    assert out.decode("utf-8") == text


@pytest.mark.parametrize("encoding", ["utf-8", "utf-16"])
def test_read_without_a_size_gives_the_whole_log_past_the_sniffed_head(encoding):
    # read() as a file gives it: everything, not the 64 KiB head the sniffer took first
    text = "".join(f"{i}: {i / 7:.6f}, 1.0 avg, 0.001 rate, 1.0 seconds, {i} images\n" for i in range(4000))
    stream = open_log_bytes(io.BytesIO(text.encode(encoding)))
    assert stream.read().decode("utf-8") == text and stream.read() == b""


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found")
@pytest.mark.parametrize("rel,encoding,needle", [
    ("keras/keras3-utf16le-ansi.log", "utf-16", "Epoch 1/60"),
    ("yolo/yolox-gbk-crlf.log", "gb18030", "不羡仙"),
])
def test_real_utf16_and_gbk_logs_transcode(rel, encoding, needle):
    with open(REAL_LOGS / rel, "rb") as fh:
        assert detect_encoding(fh.read(65536)) == encoding
        fh.seek(0)
        data = open_log_bytes(fh).read(1 << 30)
        rest = b""
    with open(REAL_LOGS / rel, "rb") as fh:
        stream = open_log_bytes(fh)
        while chunk := stream.read(65536):
            rest += chunk
    assert needle in rest.decode("utf-8")
    assert data and b"\x00" not in rest


def test_auto_releases_metrics_at_the_first_signature_line_of_a_live_run():
    parser = AutoParser(ParserOptions())
    sp = LineSplitter("t")
    assert parser.feed(sp.feed(b"Using TensorFlow backend.\n", 0.0, 0.0)) == []
    events = parser.feed(sp.feed(b"INFO:root:Epoch[0] Batch [20]\tSpeed: 100.0 samples/sec\taccuracy=0.5\n", 0.0, 0.0))
    assert parser.chosen == "mxnet" and [m.name for m in events] == ["samples_per_sec", "accuracy"]


def test_auto_switches_once_when_another_format_clearly_dominates_the_window():
    # one stray Keras-looking line, then a detectron2 run
    d2 = (FIXTURES / "detectron2.log").read_text().splitlines(keepends=True)[1]
    text = "Epoch 1/3\n" + d2 * 5 + "Epoch 2/3\n" + d2
    parser = AutoParser(ParserOptions())
    events = _feed_in_lines(text, "auto", parser)
    assert parser.chosen == "detectron2" and parser.switched
    assert "switched from keras" in parser.reason
    assert len(series(events, "total_loss")) >= 4
    assert parser.feed.__self__ is parser._delegate  # final: direct delegation


def test_keras1_backspace_progress_bar_reports_its_final_state():
    # Keras 1/2 redraw the bar with \b: only the final state of the line counts
    data = (b"Epoch 1/1\n"
            b"  32/100 [=>....] - ETA: 3s - loss: 2.3000" + b"\b" * 41 +
            b" 100/100 [======] - 1s - loss: 1.5000 - val_loss: 1.2500\n")
    sp = LineSplitter("t")
    parser = create_parser("keras")
    events = parser.feed(sp.feed(data, 0.0, 0.0)) + parser.finish()  # the bar at its total waits for its end
    assert [(m.name, m.phase, m.value, m.iteration) for m in events] == [
        ("loss", "train", 1.5, 100), ("loss", "val", 1.25, 100)]


@pytest.mark.parametrize("fmt", ["mxnet", "keras", "generic"])
def test_a_caller_that_keeps_autos_feed_method_gets_the_same_events(fmt):
    text = "".join(f"warmup {i}\n" for i in range(WINDOW)) + (FIXTURES / f"{fmt}.log").read_text() * 3
    parser = AutoParser(ParserOptions())
    feed = parser.feed  # bound before the choice, as a caller caching it would
    sp = LineSplitter("t")
    cached = []
    for line in text.splitlines(keepends=True):
        block = sp.feed(line.encode(), 0.0, 0.0)
        if block is not None:
            cached.extend(feed(block))
    cached.extend(parser.finish())
    assert tuples(cached) == tuples(_feed_in_lines(text, "auto"))
    assert cached


@pytest.mark.parametrize("name", ["generic", "mmdet"])
def test_json_lines_with_nan_steps_and_huge_integers_do_not_break_the_parser(name):
    text = ('{"mode": "train", "step": NaN, "epoch": 1, "iter": 1, "loss": Infinity, "big": ' + "9" * 400 + '}\n'
            '{"mode": "train", "epoch": 1, "iter": 2, "loss": 0.5}\n')
    events = parse_text(text, name)
    loss = series(events, "loss")
    assert [m.value for m in loss] == [math.inf, 0.5]
    assert not series(events, "big")


@pytest.mark.parametrize("name,line", [
    ("mxnet", "INFO:root:Epoch[{n}] Batch [20]\tSpeed: 1.0 samples/sec\taccuracy=0.5"),
    ("keras", "Epoch {n}/3\n1/1 [==] - 1s - loss: 0.5"),
    ("pytorch", "Train Epoch: {n} [0/10 (0%)]\tLoss: 1.0"),
    ("lightning", "Epoch {n}:  10%|#| 1/10 [00:01<00:00, 1.0it/s, loss=0.5]"),
    ("mmdet", "Epoch [{n}][1/10]\tlr: 1e-3, time: 1.0, loss: 0.5"),
    ("yolo", "epoch: {n}/300, iter: 10/47, total_loss: 10.7"),
])
def test_absurdly_large_epoch_numbers_do_not_break_a_parser(name, line):
    events = parse_text(line.format(n="9" * 400) + "\n", name)
    assert events and all(m.epoch == math.inf for m in events if type(m) is Metric)
