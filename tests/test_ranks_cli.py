"""`--ranks` / `parsing.ranks` on the command line and in config files: `parse`, `replay` and
`run` report rank 0 by default and the ranks asked for, each record saying its rank; a bad value
is one line; the child's bytes still pass through unchanged."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainvisor import RunConfig
from trainvisor.cli import main
from trainvisor.config import ParsingConfig
from trainvisor.errors import ConfigError

from .parsing_helpers import FIXTURES

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SRUN = FIXTURES / "ranks-srun-label.log"
TORCHRUN = FIXTURES / "ranks-torchrun-tee.log"


def records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_parse_reports_rank_0_by_default_and_every_rank_with_ranks_all(capsys):
    main(["parse", "--jsonl", str(SRUN)])
    default = records(capsys.readouterr().out)
    assert [(r["rank"], r["iteration"], r["value"]) for r in default if r["name"] == "loss"] == [
        (0, 100, 0.6931), (0, 200, 0.512), (0, 300, 0.4017)]
    main(["parse", "--jsonl", "--ranks", "all", str(SRUN)])
    every = records(capsys.readouterr().out)
    assert sorted({r["rank"] for r in every}) == [0, 1, 2, 3]
    assert [(r["iteration"], r["value"], r["line"]) for r in every if r["name"] == "loss" and r["rank"] == 2] == [
        (100, 0.6929, 5), (200, 0.5087, 8), (300, 0.4102, 13)]


def test_replay_takes_a_list_of_ranks(tmp_path):
    out = tmp_path / "m.jsonl"
    main(["replay", "--ranks", "1,0", "--metrics", str(out), str(TORCHRUN)])
    got = records(out.read_text())
    assert {r["rank"] for r in got} == {0, 1} and len(got) == 24
    assert [r["value"] for r in got if r["rank"] == 1 and r["phase"] == "test"] == [0.1102, 0.9658, 0.064, 0.9798]


def test_records_of_an_unprefixed_log_carry_no_rank(capsys):
    main(["parse", "--jsonl", "--ranks", "all", str(FIXTURES / "numbered-steps.log")])
    got = records(capsys.readouterr().out)
    assert len(got) == 12 and all("rank" not in r for r in got) and got[0]["value"] == 0.6931


@pytest.mark.parametrize("command", ["parse", "replay"])
def test_a_bad_ranks_flag_is_one_line(tmp_path, command):
    extra = ["--jsonl"] if command == "parse" else []
    proc = subprocess.run(TRAINVISOR + [command, *extra, "--ranks", "first", str(SRUN)], capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == ("trainvisor: --ranks: ranks: must be all or rank numbers separated by commas "
                           "(0 or 0,3) (got 'first')\n")


def test_the_yaml_key_sets_the_ranks_and_a_bad_value_names_file_and_line(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("parsing:\n  parser: generic\n  ranks: all\n")
    assert RunConfig.from_file(str(good)).parsing == ParsingConfig(parser="generic", ranks="all")
    assert RunConfig().parsing.ranks == "0"
    bad = tmp_path / "bad.yaml"
    bad.write_text("parsing:\n  ranks: 0,-3\n")
    with pytest.raises(ConfigError) as info:
        RunConfig.from_file(str(bad))
    assert str(info.value) == (f"{bad}:2: parsing.ranks: must be all or rank numbers separated by commas (0 or 0,3) "
                               "(got '0,-3')")
    number = tmp_path / "number.yaml"
    number.write_text("parsing:\n  ranks: 3\n")  # YAML reads a number: the digits were meant
    assert RunConfig.from_file(str(number)).parsing.ranks == "3"
    number.write_text("parsing:\n  ranks: 0.5\n")
    with pytest.raises(ConfigError, match=r"number.yaml:2: parsing.ranks: must be a string, got a number 0.5"):
        RunConfig.from_file(str(number))


def test_run_passes_the_prefixed_bytes_through_and_reports_the_ranks_asked_for(tmp_path):
    child = "import sys; sys.stdout.write(open(sys.argv[1]).read())"
    proc = subprocess.run(
        TRAINVISOR + ["run", "-q", "--ranks", "0,2", "--run-dir", str(tmp_path / "run"), "--log-file",
                      str(tmp_path / "out.log"), "--", sys.executable, "-c", child, str(SRUN)],
        capture_output=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == SRUN.read_bytes() == (tmp_path / "out.log").read_bytes()
    got = records((tmp_path / "run" / "metrics.jsonl").read_text())
    assert sorted((r["rank"], r["iteration"], r["value"]) for r in got if r["name"] == "loss") == [
        (0, 100, 0.6931), (0, 200, 0.512), (0, 300, 0.4017), (2, 100, 0.6929), (2, 200, 0.5087), (2, 300, 0.4102)]
    assert all(r["stream"] == "stdout" for r in got)
