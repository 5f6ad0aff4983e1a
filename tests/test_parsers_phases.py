"""Phases taken from names (one rule for every parser that reads `key: value` pairs) and
configuration dumps that are no metrics, on fixtures/logs/generic-phases-config.log."""
from __future__ import annotations

import pytest

from trainvisor.events import Metric
from trainvisor.parsers.common import NameTable, split_phase

from .parsing_helpers import FIXTURES, chunked_events, parse_file, parse_text

LOG = FIXTURES / "generic-phases-config.log"


@pytest.mark.parametrize("key,want", [
    ("Train Loss", ("Loss", "train")), ("training_loss", ("loss", "train")), ("val_loss", ("loss", "val")),
    ("valid-acc", ("acc", "val")), ("Validation-accuracy", ("accuracy", "val")), ("Dev F1-macro", ("F1-macro", "val")),
    ("eval/accuracy", ("accuracy", "val")), ("test-acc", ("acc", "test")), ("acc/train", ("acc", "train")),
    ("loss_val", ("loss", "val")), ("TEST.top1", ("top1", "test")),
    ("loss", None), ("validation", None), ("trainer_steps", None), ("devices", None), ("latest_ap", None),
])
def test_split_phase(key, want):
    assert split_phase(key) == want


def test_name_table_uses_the_shared_rule_after_its_own_prefixes():
    names = NameTable(val_prefixes=("Validation-",))
    assert names("Validation-acc") == ("acc", "val")
    assert names("Dev Loss") == ("Loss", "val")
    assert NameTable(keep_prefixes=("train_",))("train_loss") == ("train_loss", "train")


@pytest.mark.parametrize("parser", ["generic", "auto"])
def test_phases_from_names_and_no_configuration(parser):
    _, ev = parse_file(LOG, parser)
    got = [(e.name, e.value, e.iteration, e.phase, e.line) for e in ev]
    assert got == [
        # lines 1-4 (Namespace(...), dropout, batch_size, hidden_size) are configuration
        ("warmup", 0.0, None, "train", 5), ("warmup", 1.0, None, "train", 6),  # a series: printed with new values
        ("Loss", 912.4, 100, "train", 7), ("Loss", 40.5, 100, "val", 7), ("F1-macro", 0.15, 100, "val", 7),
        ("Loss", 812.4, 300, "train", 8), ("Loss", 33.1, 300, "val", 8), ("F1-macro", 0.2107, 300, "val", 8),
        ("loss", 0.5, 400, "val", 9), ("accuracy", 0.8, 400, "val", 9), ("acc", 0.75, 400, "test", 9),
        ("acc", 0.9, 400, "train", 9), ("top1", 0.7, 400, "val", 9),
    ]


def test_configuration_alone_gives_nothing():
    text = "lr: 0.1\ndropout: 0.5\nbatch_size=32\ndropout: 0.5\n"
    assert parse_text(text, "generic") == []


def test_a_result_name_starts_the_training_at_once():
    text = "dropout: 0.5\nloss: 0.25\nmomentum: 0.9\n"
    assert [(e.name, e.value) for e in parse_text(text, "generic")] == [("loss", 0.25), ("momentum", 0.9)]


@pytest.mark.parametrize("parser,line,want", [
    ("lightning", "Epoch 1: 100%|##########| 50/50 [00:02<00:00, 21.0it/s, v_num=0, train_loss=0.3, val_acc=0.9]",
     [("loss", 0.3, "train"), ("acc", 0.9, "val")]),
    ("keras", "50/50 [==============================] - 2s 40ms/step - loss: 0.3 - val_loss: 0.4 - test_acc: 0.7",
     [("loss", 0.3, "train"), ("loss", 0.4, "val"), ("acc", 0.7, "test")]),
    ("huggingface", "{'eval_loss': 0.4, 'test_accuracy': 0.7, 'epoch': 1.0}",
     [("loss", 0.4, "val"), ("accuracy", 0.7, "test")]),
])
def test_other_pair_parsers_share_the_rule(parser, line, want):
    assert [(e.name, e.value, e.phase) for e in parse_text(line + "\n", parser) if type(e) is Metric] == want


@pytest.mark.parametrize("parser", ["generic", "auto"])
@pytest.mark.parametrize("chunk", [1, 9, 4096])
def test_live_equals_replay(parser, chunk):
    line_by_line = chunked_events(LOG, parser, 0)
    assert len(line_by_line) == 13
    assert chunked_events(LOG, parser, chunk) == line_by_line
