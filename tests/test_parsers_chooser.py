"""The registry's public view (`ParserInfo`) and `auto`'s pure chooser, table-driven.

The chooser is a function of (argv, first lines, infos): each row of the tables
below is one rule it must follow, named after what it proves.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from trainvisor.errors import ParserError
from trainvisor.parsers import ParserInfo, available_parsers, get_parser_info, parser_infos
from trainvisor.parsers.chooser import WINDOW, Choice, candidates, choose, first_signature

INFOS = parser_infos()
KERAS = "Epoch 1/2\n"
MXNET = "INFO:root:Epoch[0] Batch [20]\tSpeed: 512.30 samples/sec\taccuracy=0.112500\n"
CAFFE = "I0827 10:27:16.124927 28582 solver.cpp:250] Iteration 0, loss = 2.3\n"
PLAIN = "plain progress line\n"
# BERT's banner through TensorFlow's logger, absl's copy of it, and the Hugging Face Trainer's own
TF_BANNER = "INFO:tensorflow:***** Running training *****\n"
ABSL_BANNER = "I0513 23:27:10.305861 139977807611712 run_classifier.py:870] ***** Running training *****\n"
HF_BANNER = "***** Running training *****\n"
ESTIMATOR = "INFO:tensorflow:Calling model_fn.\n"
DEPRECATION = ("WARNING:tensorflow:From /x/ops/math_ops.py:3066: to_float (from tensorflow.python.ops.math_ops) is "
               "deprecated and will be removed in a future version.\n")

CHOICES = [
    # (case, argv, lines, final, expected Choice or None)
    ("command_line_names_caffe", ["caffe", "train"], [], False,
     Choice("caffe", "command line names 'caffe'", "command")),
    ("command_line_path_to_caffe_bin", ["/opt/caffe/build/tools/caffe.bin", "train"], [KERAS], False,
     Choice("caffe", "command line names 'caffe.bin'", "command")),
    ("command_line_beats_the_lines", ["./darknet", "detector"], [KERAS] * 5, False,
     Choice("darknet", "command line names 'darknet'", "command")),
    ("only_the_first_three_words_count", ["python", "-u", "train.py", "caffe"], [], False, None),
    ("no_lines_undecided", ["python", "train.py"], [], False, None),
    ("plain_lines_undecided_before_the_window", [], [PLAIN] * (WINDOW - 1), False, None),
    ("plain_lines_fall_back_at_the_window", [], [PLAIN] * WINDOW, False,
     Choice("generic", f"no known format in the first {WINDOW} lines", "fallback")),
    ("nothing_at_the_end_falls_back", [], [PLAIN] * 3, True,
     Choice("generic", "no known format in the first 3 lines", "fallback")),
    ("one_signature_line_decides", [], [PLAIN, KERAS], False,
     Choice("keras", "1 keras signature lines in the first 2 lines", "signature")),
    ("caffe_glog_line_decides", [], [CAFFE], False,
     Choice("caffe", "1 caffe signature lines in the first 1 lines", "signature")),
    ("a_tie_is_undecided", [], [KERAS, MXNET], False, None),
    ("twice_the_next_is_not_enough", [], [KERAS, KERAS, MXNET], False, None),
    ("more_than_twice_the_next_decides", [], [KERAS, KERAS, KERAS, MXNET], False,
     Choice("keras", "3 keras signature lines in the first 4 lines (others: mxnet 1)", "signature")),
    ("a_tie_at_the_end_goes_to_the_more_specific_format", [], [KERAS, MXNET], True,
     Choice("mxnet", "1 mxnet signature lines in the first 2 lines (others: keras 1)", "signature")),
    ("a_tie_at_the_window_falls_back", [], [KERAS, MXNET] + [PLAIN] * (WINDOW - 2), False,
     Choice("generic", f"no known format in the first {WINDOW} lines", "fallback")),
    ("a_banner_through_tensorflows_logger_is_tensorflows", [], [PLAIN, TF_BANNER], False,
     Choice("tensorflow", "1 tensorflow signature lines in the first 2 lines", "signature")),
    ("absls_copy_of_the_banner_too", [], [ABSL_BANNER], False,
     Choice("tensorflow", "1 tensorflow signature lines in the first 1 lines", "signature")),
    ("the_trainers_own_banner_is_hugging_faces", [], [HF_BANNER], False,
     Choice("huggingface", "1 huggingface signature lines in the first 1 lines", "signature")),
    # counted for both formats, the three TensorFlow banners would tie 3 to 4 and decide nothing
    ("a_line_counts_for_the_first_format_it_signs_only", [], [TF_BANNER] * 3 + [HF_BANNER], False,
     Choice("tensorflow", "3 tensorflow signature lines in the first 4 lines (others: huggingface 1)", "signature")),
    ("the_estimators_first_line_decides", [], [DEPRECATION] * 3 + [ESTIMATOR], False,
     Choice("tensorflow", "1 tensorflow signature lines in the first 4 lines", "signature")),
    ("deprecation_warnings_sign_no_format", [], [DEPRECATION] * 10, False, None),
]


@pytest.mark.parametrize("case,argv,lines,final,expected", CHOICES, ids=[c[0] for c in CHOICES])
def test_chooser(case, argv, lines, final, expected):
    assert choose(argv, lines, INFOS, final=final) == expected


def test_chooser_sees_only_the_infos_it_is_given():
    without_keras = tuple(i for i in INFOS if i.name != "keras")
    assert choose([], [KERAS] * 3, without_keras) is None
    mine = ParserInfo("mine", "a user's format", r"^MINE \d+", ("MINE",))
    assert choose([], ["MINE 1\n"], INFOS + (mine,)) == Choice("mine", "1 mine signature lines in the first 1 lines",
                                                                "signature")


SIGNATURES = [
    # (case, text, expected (line index, name, excerpt) or None)
    ("no_signature", PLAIN * 3, None),
    ("first_line", KERAS + PLAIN, (0, "keras", "Epoch 1/2")),
    ("after_plain_lines", PLAIN * 2 + MXNET + KERAS, (2, "mxnet", "Epoch[0] Batch")),
    ("caffe_line", PLAIN + CAFFE, (1, "caffe", CAFFE[:CAFFE.index("]") + 1])),
    ("a_banner_through_tensorflows_logger", PLAIN + TF_BANNER, (1, "tensorflow", TF_BANNER.rstrip("\n"))),
    ("the_trainers_banner", DEPRECATION + HF_BANNER, (1, "huggingface", HF_BANNER.rstrip("\n"))),
]


@pytest.mark.parametrize("case,text,expected", SIGNATURES, ids=[c[0] for c in SIGNATURES])
def test_first_signature(case, text, expected):
    hit = first_signature(text, candidates(INFOS))
    assert (None if hit is None else (hit.line_index, hit.name, hit.excerpt)) == expected


def test_candidates_leave_out_auto_and_the_fallback_and_keep_priority_order():
    names = [n for n, _ in candidates(INFOS)]
    assert "auto" not in names and "generic" not in names
    assert names[:2] == ["caffe", "mxnet"] and names.index("keras") < names.index("pytorch")


# -- the registry's public view ------------------------------------------------------------------

def test_parser_infos_are_frozen_sorted_and_agree_with_available_parsers():
    assert [i.name for i in INFOS] == sorted(i.name for i in INFOS)
    assert [(i.name, i.description) for i in INFOS] == available_parsers()
    with pytest.raises(dataclasses.FrozenInstanceError):
        INFOS[0].name = "x"  # type: ignore[misc]


def test_every_format_parser_declares_a_compiling_signature_and_markers():
    for info in INFOS:
        if info.name in ("auto", "generic"):
            continue
        assert info.markers and all(isinstance(m, str) and m for m in info.markers), info.name
        re.compile(info.signature, re.M)


def test_get_parser_info_of_caffe():
    info = get_parser_info("caffe")
    assert info.markers == ("] ",)
    assert re.search(info.signature, CAFFE, re.M)


def test_unknown_parser_info_names_the_known_ones():
    with pytest.raises(ParserError, match=r"unknown parser 'nope' \(available: auto, caffe, "):
        get_parser_info("nope")


# -- who may import what ---------------------------------------------------------------------------

PKG = Path(__file__).resolve().parents[1] / "trainvisor"


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every `from X import names` in a file, relative modules as written."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.append(("." * node.level + (node.module or ""), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out.extend((a.name, []) for a in node.names)
    return out


def test_auto_and_the_chooser_use_only_the_registrys_public_names():
    for name in ("auto.py", "chooser.py"):
        for module, names in _imports(PKG / "parsers" / name):
            if module in (".", "..parsers", "trainvisor.parsers"):
                assert not [n for n in names if n.startswith("_")], (name, names)


def test_no_sink_imports_from_parsers():
    for path in sorted((PKG / "sinks").glob("*.py")):
        for module, _ in _imports(path):
            assert "parsers" not in module, (path.name, module)
    for path in sorted((PKG / "sinks").glob("*.[ch]")):
        assert "parsers/" not in path.read_text(), path.name
