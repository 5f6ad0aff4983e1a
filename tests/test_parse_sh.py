"""`trainvisor parse --format sh` against Caffe's own tools/extra/parse_log.sh, and Caffe's
plot_training_log.py drawing every chart type from both.

parse_log.sh and plot_training_log.py run as they are, from ../shared/tools/caffe (never copied
into the project; plot_training_log.py is loaded from there, or from a temporary directory where
a `parse_log.sh` beside it runs trainvisor, since it calls the parse_log.sh beside itself).

The year: parse_log.sh dates glog lines in the year its temporary file was made (now), trainvisor
in --year 2026. Only seconds across February 29 could differ; none of these logs spans a February.
"""
from __future__ import annotations

import datetime
import importlib.util
import os
import random
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trainvisor.cli import main

from .conftest import FIXTURES, REAL_LOGS, real_logs

TOOLS = REAL_LOGS.parent / "tools" / "caffe"
YEAR = "2026"

# The three logs compared byte for byte, with the chart types plot_training_log.py cannot draw
# from parse_log.sh's own tables (it raises IndexError on a short row), and why.
LOGS = {
    # the last "Iteration 10000, loss" has no lr line after it: a row of 3 cells, read for LearningRate
    "bearpaw-fork-mnist.log": {4, 5},
    "ducha-adadelta1e-7.log": set(),
    # old Caffe, one test output (accuracy): test rows of 3 cells, read for TestLoss
    "oxford102-vggs-old-caffe.log": {2, 3},
}
CHARTS = range(8)  # plot_training_log.py's chart types 0-7


def caffe_tools() -> Path:
    """../shared/tools/caffe and the programs parse_log.sh runs, or skip with the reason."""
    if not (TOOLS / "parse_log.sh").is_file():
        pytest.skip(f"Caffe's tools not available: {TOOLS} (they live in ../shared/tools beside the repo)")
    missing = [p for p in ("bash", "sed", "grep", "awk", "paste", "column") if shutil.which(p) is None]
    if missing:
        pytest.skip(f"parse_log.sh needs {', '.join(missing)}, not installed here")
    return TOOLS


def shell_env() -> dict[str, str]:
    """parse_log.sh's environment: `python` for extract_seconds.py's shebang is this interpreter's;
    the C locale, so column counts bytes as characters everywhere."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return {**os.environ, "PATH": path, "LC_ALL": "C", "LANG": "C"}


def parse_log_sh(log: Path, outdir: Path) -> None:
    outdir.mkdir(exist_ok=True)
    subprocess.run(["bash", str(caffe_tools() / "parse_log.sh"), str(log)], cwd=outdir, env=shell_env(),
                   check=True, capture_output=True, timeout=120)


def trainvisor_sh(log: Path, outdir: Path) -> None:
    subprocess.run([sys.executable, "-m", "trainvisor", "parse", str(log), "--format", "sh", "-o", str(outdir),
                    "--year", YEAR], check=True, capture_output=True, timeout=120)


def both(log_name: str, tmp_path: Path) -> tuple[Path, Path]:
    """(parse_log.sh's folder, trainvisor's folder), each holding LOG.train and LOG.test."""
    log = real_logs("caffe") / log_name
    parse_log_sh(log, tmp_path / "sh")
    trainvisor_sh(log, tmp_path / "tv")
    return tmp_path / "sh", tmp_path / "tv"


def cells(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines()[1:]]


@pytest.mark.parametrize("log_name", sorted(LOGS))
def test_tables_are_parse_log_sh_byte_for_byte(log_name, tmp_path):
    sh, tv = both(log_name, tmp_path)
    for table in ("train", "test"):
        mine = (tv / f"{log_name}.{table}").read_bytes()
        assert mine == (sh / f"{log_name}.{table}").read_bytes(), table
        assert len(mine.splitlines()) > 2, "a table without rows proves nothing"


def shift_glog_times(text: str, seconds: float) -> str:
    """`text` with every glog time moved by `seconds` (a log of December 31 and January 1)."""
    def moved(m: re.Match) -> str:
        year = 2025 if m.group(1).startswith("12") else 2026
        t = datetime.datetime.strptime(f"{year}{m.group(1)} {m.group(2)}", "%Y%m%d %H:%M:%S.%f")
        return "I" + (t + datetime.timedelta(seconds=seconds)).strftime("%m%d %H:%M:%S.%f")

    return re.sub(r"(?m)^I(\d{4}) (\d\d:\d\d:\d\d\.\d{6})", moved, text)


def test_a_run_across_new_year_and_a_test_pass_across_midnight_match_parse_log_sh(tmp_path):
    # The project's lenet-newyear.log, and the same log 19.86 s later: "Iteration 500, Testing net"
    # (line 60, 23:59:40.109519) then starts in one year and prints its outputs (23:59:40.159787)
    # in the next.
    original = (FIXTURES / "logs" / "lenet-newyear.log").read_text()
    later = shift_glog_times(original, 19.86)
    assert "I1231 23:59:59.969519  4242 solver.cpp:351] Iteration 500, Testing net" in later
    assert "I0101 00:00:00.019787  4242 solver.cpp:418]     Test net output #0" in later
    for name, text in (("newyear.log", original), ("midnight.log", later)):
        log = tmp_path / name
        log.write_text(text)
        parse_log_sh(log, tmp_path / f"sh-{name}")
        trainvisor_sh(log, tmp_path / f"tv-{name}")
        for table in ("train", "test"):
            mine = (tmp_path / f"tv-{name}" / f"{name}.{table}").read_text()
            assert mine == (tmp_path / f"sh-{name}" / f"{name}.{table}").read_text(), (name, table)
    assert cells(tmp_path / "tv-midnight.log" / "midnight.log.test")[2] == ["500", "100.107992", "0.8273", "0.180624"]


def test_test_rows_take_the_time_of_their_testing_net_line(tmp_path):
    # bearpaw-fork-mnist.log: "Solving" at 10:27:16.124927 (line 495), "Iteration 0, Testing net (#0)"
    # at 10:27:16.125336 (line 497), its first output at 10:27:16.261087: parse_log.sh's 0.000409,
    # not the output's 0.136160; the train rows' times are those of their loss lines.
    _, tv = both("bearpaw-fork-mnist.log", tmp_path)
    test, train = cells(tv / "bearpaw-fork-mnist.log.test"), cells(tv / "bearpaw-fork-mnist.log.train")
    assert test[0] == ["0", "0.000409", "0.0756", "10.0086"]
    assert test[-1] == ["10000", "26.625361", "0.9913", "0.0509408"]
    assert train[0] == ["0", "0.138055", "10.0777", "0.01"]
    assert train[-1] == ["10000", "26.625345", "0.00307831"]  # no lr is printed after the last loss


def test_multistep_line_shifts_parse_log_sh_iterations_not_ours(tmp_path):
    # simplenet-imagenet-2gpu.log line 4343, "MultiStep Status: Iteration 50000, step = 1", lies
    # between two test passes: parse_log.sh takes it for one more test iteration, so from there on
    # its rows say the iteration before theirs. The pass at 42219.849748 s is "Iteration 51000,
    # Testing net (#0)" (line 4372).
    sh, tv = both("simplenet-imagenet-2gpu.log", tmp_path)
    theirs, mine = cells(sh / "simplenet-imagenet-2gpu.log.test"), cells(tv / "simplenet-imagenet-2gpu.log.test")
    assert len(theirs) == len(mine) + 1
    at = next(i for i, row in enumerate(mine) if row[1] == "42219.849748")
    assert mine[at][0] == "51000" and theirs[at][0] == "50000"
    assert mine[:at] == theirs[:at]
    assert [row[1:] for row in mine[at:]] == [row[1:] for row in theirs[at:len(mine)]]
    assert [row[0] for row in mine[at:]] == [row[0] for row in theirs[at + 1:]]


def test_windows_exponents_become_the_same_numbers_as_glibc_prints_them(tmp_path):
    # simplenet-mnist-windows.log: MSVC prints "4.1066e-005", glibc (and this table) "4.1066e-05".
    sh, tv = both("simplenet-mnist-windows.log", tmp_path)
    theirs, mine = cells(sh / "simplenet-mnist-windows.log.train"), cells(tv / "simplenet-mnist-windows.log.train")
    assert theirs[0][2] == "4.1066e-005" and mine[0][2] == "4.1066e-05"
    assert [[float(c) for c in row] for row in mine] == [[float(c) for c in row] for row in theirs]


def test_nul_bytes_do_not_end_the_tables_early(tmp_path):
    # ssd-voc0712-nul-tail.log ends in NUL bytes (line 8489): grep calls the file binary and
    # prints no more matches, so parse_log.sh's train table stops at "Iteration 7390, loss" (line
    # 7589, its lr lost too) and its test table is empty. The log goes on to "Iteration 10360,
    # loss = 3.83667" (line 8486) and a test pass at iteration 10000 (line 8374).
    sh, tv = both("ssd-voc0712-nul-tail.log", tmp_path)
    theirs, mine = cells(sh / "ssd-voc0712-nul-tail.log.train"), cells(tv / "ssd-voc0712-nul-tail.log.train")
    assert theirs[-1] == ["7390", "12642.187783", "3.90722"]
    assert mine[:len(theirs) - 1] == theirs[:-1]
    assert mine[len(theirs) - 1] == ["7390", "12642.187783", "3.90722", "0.001"]
    assert mine[-1] == ["10360", "17832.128291", "3.83667", "0.001"]
    assert cells(sh / "ssd-voc0712-nul-tail.log.test") == []
    assert cells(tv / "ssd-voc0712-nul-tail.log.test") == [["10000", "17105.712452", "0.642119"]]


# -- plot_training_log.py over both tables ------------------------------------------------------


def load_plot_script(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def draw(script, chart: int, log: Path, png: Path):
    """plot_training_log.py's chart `chart` of `log`: (title, axis labels, each line's data and
    style) and the PNG's pixels, or the exception it raised. Markers and colours are random in the
    script: the same seed gives both runs the same ones."""
    import matplotlib.pyplot as plt
    from matplotlib.image import imread

    plt.close("all")
    random.seed(chart)
    script.chart_type = chart  # the script reads its chart type from a global set in __main__
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plt.show() under Agg says it shows nothing
            script.plot_chart(chart, str(png), [str(log)])
    except Exception as exc:  # what parse_log.sh's tables make it raise is compared too
        return type(exc).__name__
    ax = plt.gcf().axes[0]
    lines = [(list(ln.get_xdata()), list(ln.get_ydata()), ln.get_label(), ln.get_marker(), ln.get_color())
             for ln in ax.lines]
    drawn = (ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), lines)
    plt.close("all")
    return drawn, imread(str(png)).tolist()


@pytest.fixture
def plotting(tmp_path_factory, monkeypatch):
    """matplotlib with the Agg backend and its caches in a temporary directory."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path_factory.mktemp("mplconfig")))
    pytest.importorskip("matplotlib", reason="plot_training_log.py needs matplotlib (the test extra)")
    import matplotlib

    matplotlib.use("Agg")
    monkeypatch.setenv("PATH", shell_env()["PATH"])
    monkeypatch.setenv("LC_ALL", "C")
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


@pytest.mark.parametrize("log_name", sorted(LOGS))
def test_plot_training_log_draws_the_same_charts_from_both(log_name, tmp_path, plotting, monkeypatch):
    log = real_logs("caffe") / log_name
    tools = caffe_tools()
    reference = load_plot_script(tools / "plot_training_log.py", "plot_training_log_sh")
    # The same script beside a parse_log.sh that is trainvisor: what a user who swaps them runs.
    swapped = tmp_path / "swapped"
    swapped.mkdir()
    shutil.copy(tools / "plot_training_log.py", swapped)
    shim = swapped / "parse_log.sh"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m trainvisor parse "$1" --format sh -o . --year {YEAR}\n')
    shim.chmod(0o755)
    ours = load_plot_script(swapped / "plot_training_log.py", "plot_training_log_tv")
    failed = set()
    for chart in CHARTS:
        results = []
        for tag, script in (("sh", reference), ("tv", ours)):
            workdir = tmp_path / f"{tag}-{chart}"
            workdir.mkdir()
            monkeypatch.chdir(workdir)  # both parsers write their tables into the working directory
            results.append(draw(script, chart, log, workdir / "chart.png"))
        assert results[0] == results[1], f"chart {chart} differs"
        if isinstance(results[0], str):
            failed.add(chart)
        else:
            assert results[0][0][3][0][0], f"chart {chart} has no points"
    assert failed == LOGS[log_name]


# -- the command line -----------------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--format", "sh"], "trainvisor: --format sh needs -o OUTDIR (where to write LOG.train and LOG.test)\n"),
    (["--csv", "{tmp}/a", "--format", "sh"],
     "trainvisor: --csv writes parse_log.py's CSV; for parse_log.sh's layout use --format sh -o DIR\n"),
    (["--csv", "{tmp}/a", "-o", "{tmp}/b"], "trainvisor: give the tables' directory once: --csv DIR or -o DIR\n"),
])
def test_table_flags_that_do_not_fit_are_one_line_errors(args, message, tmp_path, capsys):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    with pytest.raises(SystemExit) as exit_info:
        main(["parse", str(log)] + [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == message
    assert list(tmp_path.iterdir()) == []


def test_a_log_without_caffe_metrics_gets_header_only_tables_and_a_note(tmp_path, capsys):
    # The keras parser's validation values (val_loss 0.4 at step 250 ...) are no Caffe test net's
    # outputs: parse_log.sh would find nothing in this log either.
    log = FIXTURES / "logs" / "keras.log"
    main(["parse", str(log), "--format", "sh", "-o", str(tmp_path / "out")])
    assert (tmp_path / "out" / "keras.log.train").read_text() == "#Iters Seconds TrainingLoss LearningRate\n"
    assert (tmp_path / "out" / "keras.log.test").read_text() == "#Iters Seconds TestAccuracy TestLoss\n"
    assert capsys.readouterr().err.endswith(
        f"trainvisor: no Caffe metrics found in {log}; the tables have a header only\n")
