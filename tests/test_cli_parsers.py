"""CLI wiring of the parsers: `trainvisor parsers`, `parse --jsonl`, `--parser`, `--rules`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainvisor.cli import main

from .parsing_helpers import FIXTURES, REAL_LOGS


def test_parsers_command_lists_every_parser_with_a_description(capsys):
    main(["parsers"])
    lines = capsys.readouterr().out.splitlines()
    names = [ln.split()[0] for ln in lines]
    assert names == sorted(names) and {"auto", "caffe", "keras", "mxnet", "generic"} <= set(names)
    assert all(len(ln.split(None, 1)) == 2 for ln in lines)


def test_parse_jsonl_uses_auto_by_default(capsys):
    main(["parse", "--jsonl", str(FIXTURES / "mxnet.log")])
    records = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert records[0]["name"] == "samples_per_sec" and records[0]["value"] == 512.3
    assert any(r["name"] == "cross-entropy" and r["value"] == "nan" for r in records)
    assert any(r.get("event") == "checkpoint" and r["path"] == "model/mnist-0001.params" for r in records)


def test_unknown_parser_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as info:
        main(["parse", "--jsonl", "--parser", "nosuch", str(FIXTURES / "mxnet.log")])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("trainvisor: unknown parser 'nosuch'") and err.count("\n") == 1


def test_parse_without_an_output_says_what_to_give(capsys):
    with pytest.raises(SystemExit):
        main(["parse", str(FIXTURES / "mxnet.log")])
    assert capsys.readouterr().err == "trainvisor: nothing to write: give --jsonl, --csv OUTDIR or --format sh -o OUTDIR\n"


def test_rules_on_the_command_line_add_metrics(tmp_path, capsys):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - name: batch\n    contains: Speed\n    pattern: 'Batch \\[(?P<batch_no>\\d+)\\]'\n")
    main(["parse", "--jsonl", "--rules", str(rules), str(FIXTURES / "mxnet.log")])
    records = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert [r["value"] for r in records if r.get("name") == "batch_no"] == [20.0, 40.0]
    assert any(r.get("name") == "accuracy" and r.get("phase") == "val" for r in records)


@pytest.mark.skipif(not REAL_LOGS.is_dir(), reason="real logs not found")
def test_replay_reads_a_utf16_log_end_to_end(tmp_path):
    out = tmp_path / "m.jsonl"
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "replay", "--metrics", str(out),
                           str(REAL_LOGS / "keras/keras3-utf16le-ansi.log")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(ln) for ln in out.read_text().splitlines()]
    val_acc = [r["value"] for r in records if r["name"] == "accuracy" and r["phase"] == "val"]
    assert len(val_acc) == 60 and val_acc[0] == 0.3144


def test_run_log_says_which_parser_auto_chose_and_why(tmp_path):
    code = "print('Epoch 1/2'); print('10/10 [====] - 1s 10ms/step - loss: 0.5 - val_loss: 0.4')"
    rd = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "trainvisor", "run", "-q", "--run-dir", str(rd), "--",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "parser auto: chose keras (1 keras signature lines in the first 1 lines)" in (rd / "train.log").read_text()
    records = [json.loads(ln) for ln in (rd / "metrics.jsonl").read_text().splitlines()]
    assert [(r["name"], r["phase"], r["value"]) for r in records] == [("loss", "train", 0.5), ("loss", "val", 0.4)]
