"""The timeline of one real log of each built-in format: the epoch_end and test_end events equal
what a reader of the log counts. Each reader here is a few independent regexes over the log's
text (not the parser's code), so the count, the epochs and the values are read, not pasted."""
from __future__ import annotations

import json
import math
import re

import pytest

import trainvisor
from trainvisor.timeline import timeline_of

from .conftest import real_logs

NUM = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan)"


def _timeline(path):
    return timeline_of(trainvisor.replay(path).events)


def _ends(events, kind):
    return [e for e in events if e.kind == kind]


def _read_lines(path, encoding="utf-8"):
    return path.read_text(encoding=encoding, errors="replace").splitlines()


# ---- one reader per format: (test passes, epochs) as a person counts them ----

def caffe_reader(lines):
    """Each `Iteration N, Testing net (#K)` and the `Test net output` lines under it."""
    passes = []
    for line in lines:
        m = re.search(r"Iteration (\d+), Testing net \(#(\d+)\)", line)
        if m:
            passes.append(((int(m[1]), int(m[2])), {}))
            continue
        m = re.search(r"Test net output #\d+: (\S+) = " + NUM, line)
        if m:
            passes[-1][1][m[1]] = float(m[2])
    return passes, []


def keras_reader(lines):
    """`Epoch N/M`, then the line with `- loss: ... - val_loss: ...` (Keras 2 verbose 1/2)."""
    tests, epochs, epoch = [], [], None
    for line in lines:
        m = re.match(r"Epoch (\d+)/\d+", line)
        if m:
            epoch = int(m[1])
        elif "val_loss:" in line:
            pairs = dict(re.findall(r" - (\w+): " + NUM, line))
            train = {f"train/{k}": float(v) for k, v in pairs.items() if not k.startswith("val_")}
            val = {k[4:]: float(v) for k, v in pairs.items() if k.startswith("val_")}
            tests.append((epoch, val))
            epochs.append((epoch, {**train, **{f"val/{k}": v for k, v in val.items()}}))
    return tests, epochs


def lightning_reader(lines):
    """tqdm bars `Epoch N: ...` show the last validation's `val_loss=..., val_acc=...`: the first
    bar of epoch N that shows them has epoch N-1's validation (this log logs nothing else)."""
    tests, seen = [], set()
    for line in lines:
        m = re.match(r"Epoch (\d+):.*val_loss=" + NUM + r", val_acc=" + NUM, line)
        if m and int(m[1]) not in seen:
            seen.add(int(m[1]))
            tests.append((int(m[1]) - 1, {"loss": float(m[2]), "acc": float(m[3])}))
    return tests, [(e, {f"val/{k}": v for k, v in vals.items()}) for e, vals in tests]


def huggingface_reader(lines):
    """The Trainer's dict lines; an `eval_*` dict is a validation pass; an epoch is every dict whose
    `epoch` rounds up to one number (0.22 is in epoch 1), its values the last of each key up to its
    evaluation (what follows it, the end-of-training summary, a script's `evaluate()`, is after
    the epoch's end)."""
    tests, epochs, evaluated = [], [], False
    for line in lines:
        found = re.search(r"\{'.*'epoch': [^}]*\}", line)  # also a script's `eval_results= {...}`
        if not found:
            continue
        d = {k: float(v) for k, v in re.findall(r"'(\w+)': " + NUM, found[0])}
        number = math.ceil(d.pop("epoch") - 1e-9)
        if not epochs or epochs[-1][0] != number:
            epochs.append((number, {}))
            evaluated = False
        is_eval = any(k.startswith("eval_") for k in d)
        if is_eval:
            tests.append((number, {k[5:]: v for k, v in d.items()}))
        if not evaluated:
            prefix, cut = ("val/", 5) if is_eval else ("train/", 0)
            epochs[-1][1].update({prefix + k[cut:]: v for k, v in d.items()})
        evaluated = evaluated or is_eval
    return tests, epochs


def mxnet_reader(lines):
    """`Epoch[N] Validation-accuracy=X` is the pass; `Epoch[N] Train-accuracy=` the epoch's train value."""
    tests, epochs = [], {}
    for line in lines:
        m = re.search(r"Epoch\[(\d+)\] (Train|Validation)-accuracy=" + NUM, line)
        if m:
            n, which = int(m[1]), m[2]
            epochs.setdefault(n, {})["train/accuracy" if which == "Train" else "val/accuracy"] = float(m[3])
            if which == "Validation":
                tests.append((n, {"accuracy": float(m[3])}))
    return tests, sorted(epochs.items())


def detectron2_reader(lines):
    """Each `copypaste: Task: T` block: a header line of names, a line of values (one pass at the
    last `iter:` before it)."""
    tests, task, names = [], None, None
    for line in lines:
        m = re.search(r"copypaste: Task: (\S+)", line)
        if m:
            task, names = m[1], None
        elif "copypaste: " in line and task:
            row = line.split("copypaste: ", 1)[1].split(",")
            if names is None:
                names = row
            else:
                if not tests:
                    tests.append((None, {}))
                tests[-1][1].update({f"{task}/{n}": float(v) for n, v in zip(names, row)})
                task = None
    return tests, []


def mmdet_reader(lines):
    """mmdet 2.x: `Epoch [N][i/T]  name: value, ...`; the line with `bbox_mAP` is the evaluation
    (its `bbox_mAP_copypaste` is six numbers for pasting, not a value)."""
    tests, epochs = [], {}
    for line in lines:
        m = re.search(r"Epoch \[(\d+)\]\[\d+/\d+\]\s+(.*)", line)
        if not m:
            continue
        vals = {k: float(v) for k, v in re.findall(r"(\w+): " + NUM + r"(?=,|$)", m[2])}
        n = int(m[1])
        if "bbox_mAP" in vals:
            tests.append((n, vals))
            epochs.setdefault(n, {}).update({"val/" + k: v for k, v in vals.items()})
        else:
            epochs.setdefault(n, {})["train/loss"] = vals["loss"]
    return tests, sorted(epochs.items())


def yolov5_reader(lines):
    """Each `all` row (P R mAP@.5 mAP@.5:.95) after the train row `E/9 ...` of its epoch."""
    tests, epoch = [], None
    for line in lines:
        m = re.match(r"\s+(\d+)/\d+\s+\S+\s+" + NUM, line)
        if m:
            epoch = int(m[1])
        m = re.match(r"\s+all\s+\d+\s+\d+\s+" + r"\s+".join([NUM] * 4), line)
        if m:
            tests.append((epoch, dict(zip(("P", "R", "mAP@.5", "mAP@.5:.95"), map(float, m.groups())))))
    epochs = {}
    for e, vals in tests:  # an epoch's own validation (not best.pt's, validated after the last)
        epochs.setdefault(e, {"val/" + k: v for k, v in vals.items()})
    return tests, sorted(epochs.items())


def tensorflow_reader(lines):
    """`Saving dict for global step N: eval_accuracy = ..., ...`: one evaluation each."""
    tests = []
    for line in lines:
        m = re.search(r"Saving dict for global step (\d+): (.*)", line)
        if m:
            vals = {k[5:]: float(v) for k, v in re.findall(r"(eval_\w+) = " + NUM, m[2])}
            tests.append((int(m[1]), vals))
    return tests, []


def detr_json_reader(lines):
    """One JSON object per epoch: its `test_*` scalars are the pass (phase test), `epoch` its number."""
    tests = []
    for line in lines:
        d = json.loads(line)
        tests.append((d["epoch"], {k[5:]: v for k, v in d.items()
                                   if k.startswith("test_") and isinstance(v, float)}))
    return tests, [(e, {"test/" + k: v for k, v in vals.items()}) for e, vals in tests]


CASES = [
    ("caffe", "bearpaw-fork-mnist.log", caffe_reader, "iteration"),
    ("keras", "esartic-sound-cnn-30ep.log", keras_reader, "epoch"),
    ("lightning", "wandb-lightning-progress.log", lightning_reader, "epoch"),
    ("huggingface", "eshaubale-hf-trainer-padded.log", huggingface_reader, "epoch"),
    ("mxnet", "ouyangchao-mxnet-cls.log", mxnet_reader, "epoch"),
    ("detectron2", "bupt-d2-rpn-fpn-backbone-fpn.log", detectron2_reader, None),
    ("mmdetection", "mmdet2-faster-rcnn-12ep.log", mmdet_reader, "epoch"),
    ("yolo", "yolov5-stdout-cpu.log", yolov5_reader, "epoch"),
    ("tensorflow", "bert-similarity-estimator.log", tensorflow_reader, "iteration"),
    ("pytorch", "detr-log-jsonl.log", detr_json_reader, "epoch"),
]


def _test_key(ev, by):
    if by == "iteration":
        return (ev.iteration, ev.test_net) if ev.test_net is not None else ev.iteration
    return None if by is None else math.ceil(ev.epoch - 1e-9)


def _subset(values, expected):
    """The values a reader read, as the event holds them (the parser may hold more names)."""
    return {k: values.get(k) for k in expected}


@pytest.mark.parametrize("framework,name,reader,by", CASES, ids=[c[0] for c in CASES])
def test_test_end_events_are_the_passes_a_reader_counts(framework, name, reader, by):
    path = real_logs(framework) / name
    expected, _ = reader(_read_lines(path))
    tests = _ends(_timeline(path), "test_end")
    assert expected, "the reader found the log's test passes"
    assert [_test_key(t, by) for t in tests] == [k for k, _ in expected]
    assert [_subset(t.values, vals) for t, (_, vals) in zip(tests, expected)] == [vals for _, vals in expected]


@pytest.mark.parametrize("framework,name,reader,by", [c for c in CASES if c[3] == "epoch"],
                         ids=[c[0] for c in CASES if c[3] == "epoch"])
def test_epoch_end_events_are_the_epochs_a_reader_counts(framework, name, reader, by):
    path = real_logs(framework) / name
    _, expected = reader(_read_lines(path))
    epochs = _ends(_timeline(path), "epoch_end")
    assert [e.epoch for e in epochs] == [n for n, _ in expected]
    assert [_subset(e.values, vals) for e, (_, vals) in zip(epochs, expected)] == [vals for _, vals in expected]


@pytest.mark.parametrize("framework,name", [("caffe", "bearpaw-fork-mnist.log"),
                                            ("detectron2", "bupt-d2-rpn-fpn-backbone-fpn.log"),
                                            ("tensorflow", "bert-similarity-estimator.log")])
def test_a_log_that_counts_no_epochs_has_no_epoch_end(framework, name):
    path = real_logs(framework) / name
    assert not re.search(r"\bepoch\b", path.read_text(errors="replace"), re.I)
    assert _ends(_timeline(path), "epoch_end") == []


def test_each_rank_has_its_own_timeline():
    """torchrun --tee: two ranks' lines interleaved; each rank's epochs are its own `Train Epoch`
    lines' last loss and its `Test set` line (accuracy as the fraction the line prints)."""
    from .conftest import FIXTURES

    path = FIXTURES / "logs" / "ranks-torchrun-tee.log"
    expected: dict = {}
    for line in _read_lines(path):
        m = re.match(r"\[default(\d)\]:Train Epoch: (\d+) .*Loss: " + NUM, line)
        if m:
            expected.setdefault((int(m[1]), int(m[2])), {})["train/loss"] = float(m[3])
        m = re.match(r"\[default(\d)\]:Test set: Average loss: " + NUM + r", Accuracy: (\d+)/(\d+)", line)
        if m:
            rank = int(m[1])
            epoch = max(e for r, e in expected if r == rank)
            expected[(rank, epoch)].update({"test/loss": float(m[2]), "test/accuracy": int(m[3]) / int(m[4])})
    events = timeline_of(trainvisor.replay(path, ranks="all").events)
    got = {(e.rank, e.epoch): dict(e.values) for e in _ends(events, "epoch_end")}
    assert len(got) == len(_ends(events, "epoch_end")) == 4
    assert got == expected


def _by_line(events):
    """The events in the batches a live pipeline could hand them over in: one line at a time."""
    batches, key = [], None
    for ev in events:
        k = (getattr(ev, "stream", None), getattr(ev, "line", None))
        if k != key:
            batches.append([])
            key = k
        batches[-1].append(ev)
    return batches


@pytest.mark.parametrize("framework,name,reader,by", CASES, ids=[c[0] for c in CASES])
def test_line_by_line_gives_the_same_timeline_as_the_whole_log(framework, name, reader, by):
    events = trainvisor.replay(real_logs(framework) / name).events
    from trainvisor.timeline import Timeline

    timeline = Timeline()
    fed = [ev for batch in _by_line(events) for ev in timeline.feed(batch)] + timeline.finish()
    assert fed == timeline_of(events)


def test_live_an_epoch_ends_with_its_validation_once_the_log_showed_that_it_does():
    """Keras's epoch line holds its train and validation values. The first epoch ends when the
    second begins (nothing showed yet how its epochs end); every later one with its own line."""
    from trainvisor.timeline import Timeline

    path = real_logs("keras") / "esartic-sound-cnn-30ep.log"
    timeline = Timeline()
    ended_at = []  # (epoch, the line of the batch that ended it)
    for batch in _by_line(trainvisor.replay(path).events):
        ended_at += [(e.epoch, batch[0].line) for e in timeline.feed(batch) if e.kind == "epoch_end"]
    epoch_lines = [n for n, line in enumerate(_read_lines(path), 1) if " - val_loss: " in line]
    assert ended_at[0] == (1, epoch_lines[1])
    assert ended_at[1:29] == [(e, epoch_lines[e - 1]) for e in range(2, 30)]
