"""`trainvisor plot`: the figure's lines are the metrics, read back from matplotlib's own artists.

Every expectation is taken from the same source another way: the metrics `trainvisor.replay`
gives for a real log (../shared/real-logs), the records of a run's metrics.jsonl, and the lines
Caffe's own plot_training_log.py draws from parse_log.sh's tables. NaN: a value that is NaN in
the metrics is NaN at the same place of the line's y data (matplotlib draws a gap there), so
lines are compared with numpy's array equality, which holds NaN equal to NaN.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("matplotlib", reason="trainvisor plot needs matplotlib (the plot and test extras)")

import trainvisor  # noqa: E402
from trainvisor.cli import main  # noqa: E402

from .conftest import FAKE_CAFFE, FIXTURES, real_logs  # noqa: E402
from .test_parse_sh import caffe_tools, draw, load_plot_script, plotting  # noqa: E402,F401

TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def drawn(figure) -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """{panel title: {line label: (x, y)}} read from the figure's Axes and Line2D artists."""
    return {ax.get_title(): {ln.get_label(): (np.asarray(ln.get_xdata(), float), np.asarray(ln.get_ydata(), float))
                             for ln in ax.lines} for ax in figure.axes}


def series(metrics, name: str, phase: str, test_net=None, *, x: str = "iteration", running: bool = False):
    """The values of one metric as the log gave them, in order: (x, y)."""
    picked = [m for m in metrics if (m.name, m.phase, m.test_net, m.running) == (name, phase, test_net, running)
              and getattr(m, x) is not None]
    return np.array([getattr(m, x) for m in picked], float), np.array([m.value for m in picked], float)


def label(name: str, phase: str, test_net=None) -> str:
    return f"{name} {phase}" + ("" if test_net is None else f" net {test_net}")


def assert_same_lines(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for title in want:
        assert list(got[title]) == list(want[title]), title
        for name, (x, y) in want[title].items():
            assert len(x) > 0, f"{title}: {name} has no points in the log"
            np.testing.assert_array_equal(got[title][name][0], x, err_msg=f"{title}: {name} x")
            np.testing.assert_array_equal(got[title][name][1], y, err_msg=f"{title}: {name} y")


# Per log: the x axis, the panels in the order their families first appear, and the panels that
# hold more than one line (name, phase, test net); every other panel holds its own name's line.
LOGS = {
    "caffe/digits-googlenet-6-test-outputs.log": ("iteration", [
        "accuracy", "loss", "loss1/accuracy", "loss1/loss", "loss2/accuracy", "loss2/loss", "iter_per_sec",
        "total_loss", "lr"], {
        "accuracy": [("accuracy", "test", 0)],
        "loss": [("loss", "test", 0), ("loss", "train")],
        "loss1/loss": [("loss1/loss", "test", 0), ("loss1/loss", "train")],
        "loss2/loss": [("loss2/loss", "test", 0), ("loss2/loss", "train")],
        "loss1/accuracy": [("loss1/accuracy", "test", 0)], "loss2/accuracy": [("loss2/accuracy", "test", 0)]}),
    # Keras 1 with verbose=2: epoch lines only, so x is the epoch
    "keras/kanji-keras1-verbose2-50ep.log": ("epoch", ["loss", "acc"], {
        "loss": [("loss", "train"), ("loss", "val")], "acc": [("acc", "train"), ("acc", "val")]}),
    "detectron2/bupt-d2-rpn-fpn-backbone-fpn.log": ("iteration", [
        "total_loss", "loss_rpn_cls", "loss_rpn_loc", "time", "data_time", "lr",
        *(f"box_proposals/AR{size}@{n}" for n in (100, 1000) for size in ("", "s", "m", "l"))], {}),
    "mmdetection/mmdet2-faster-rcnn-12ep.log": ("iteration", [
        "lr", "time", "data_time", "memory", "loss_rpn_cls", "loss_rpn_bbox", "loss_cls", "acc", "loss_bbox",
        "loss", "bbox_mAP", "bbox_mAP_50", "bbox_mAP_75", "bbox_mAP_s", "bbox_mAP_m", "bbox_mAP_l"], {
        "lr": [("lr", "train"), ("lr", "val")]}),
    # the Trainer's end-of-run train_loss / train_runtime ... join the panel of their family
    "huggingface/eshaubale-hf-trainer-padded.log": ("iteration", [
        "loss", "learning_rate", "runtime", "samples_per_second", "steps_per_second", "f1"], {
        "loss": [("loss", "train"), ("loss", "val"), ("train_loss", "train")],
        "runtime": [("runtime", "val"), ("train_runtime", "train")],
        "samples_per_second": [("samples_per_second", "val"), ("train_samples_per_second", "train")],
        "steps_per_second": [("steps_per_second", "val"), ("train_steps_per_second", "train")]}),
}


def expected(metrics, x: str, panels: list[str], shared: dict) -> dict:
    out = {}
    for title in panels:
        members = shared.get(title)
        if members is None:
            phases = {m.phase for m in metrics if m.name == title}
            assert len(phases) == 1, f"{title} is in more phases than the table says: {phases}"
            members = [(title, phases.pop())]
        out[title] = {label(*member): series(metrics, *member, x=x) for member in members}
    return out


@pytest.mark.parametrize("log_name", sorted(LOGS))
def test_each_line_is_one_metric_of_the_log_as_replay_parses_it(log_name, tmp_path):
    framework, name = log_name.split("/")
    log = real_logs(framework) / name
    x, panels, shared = LOGS[log_name]
    done = trainvisor.plot(log, tmp_path / "out.png")
    metrics = trainvisor.replay(log).metrics
    assert done.source.kind == "log" and done.chart.x == x and done.chart.left_out == 0
    assert_same_lines(drawn(done.figure), expected(metrics, x, panels, shared))
    assert {ax.get_xlabel() for ax in done.figure.axes} == {x}
    assert (tmp_path / "out.png").stat().st_size > 0


@pytest.mark.parametrize("name, family", [
    ("loss", "loss"), ("val_loss", "loss"), ("train_loss", "loss"), ("eval/accuracy", "accuracy"),
    ("acc/train", "acc"), ("Dev F1-macro", "F1-macro"), ("test-acc", "acc"),
    # a component, a sum, an output of a layer, a threshold: panels of their own (their own scale)
    ("loss_cls", "loss_cls"), ("total_loss", "total_loss"), ("loss1/loss", "loss1/loss"),
    ("bbox_mAP_50", "bbox_mAP_50"), ("training", "training")])
def test_a_family_is_the_name_without_its_phase_word(name, family):
    from trainvisor.plotting.series import family_of

    assert family_of(name) == family


def test_nan_values_stay_where_they_were_logged_and_values_without_an_iteration_are_counted(tmp_path):
    # darknet prints "Region 16 Avg IOU: -nan" on 2,868 lines; the first region lines come before
    # any iteration line: 7 values of each of the two regions have no iteration.
    log = real_logs("darknet") / "darknet-yolov3-tiny-nan.log"
    done = trainvisor.plot(log, tmp_path / "out.png", metrics=["region16/avg_iou", "loss"])
    metrics = trainvisor.replay(log).metrics
    got = drawn(done.figure)
    assert list(got) == ["loss", "region16/avg_iou"]
    x, y = series(metrics, "region16/avg_iou", "train")
    assert np.isnan(y).sum() == 2867  # the 2,868th NaN is the one without an iteration
    assert_same_lines(got, {"loss": {"loss train": series(metrics, "loss", "train")},
                            "region16/avg_iou": {"region16/avg_iou train": (x, y)}})
    assert done.chart.left_out == 1
    everything = trainvisor.plot(log, tmp_path / "all.png")
    assert everything.chart.left_out == 14 and len(everything.figure.axes) == 19


def test_auto_draws_over_epochs_when_iterations_would_leave_the_validation_out(tmp_path, capsys):
    # MXNet's Speedometer lines carry the batch and the epoch; "Validation-accuracy" only the epoch
    log = real_logs("mxnet") / "tornadomeet-resnet164-cifar10.log"
    metrics = trainvisor.replay(log).metrics
    done = trainvisor.plot(log, tmp_path / "auto.png", metrics=["accuracy"])
    assert (done.chart.x, done.chart.left_out) == ("epoch", 0)
    assert_same_lines(drawn(done.figure), {"accuracy": {
        label("accuracy", phase): series(metrics, "accuracy", phase, x="epoch") for phase in ("train", "val")}})
    main(["plot", str(log), "-o", str(tmp_path / "it.png"), "--metric", "accuracy", "--x", "iteration"])
    assert capsys.readouterr().err == (f"wrote {tmp_path / 'it.png'}: 1 panel, 1 line, x = iteration\n"
                                       "trainvisor: 300 values without an iteration left out\n")


def test_caffe_charts_hold_the_points_plot_training_log_draws(tmp_path, plotting, monkeypatch):
    """plot_training_log.py's charts 0, 2, 4, 6 (test accuracy, test loss, learning rate, train loss
    vs. iterations), drawn from Caffe's own parse_log.sh tables, have the points of our lines."""
    log = real_logs("caffe") / "ducha-adadelta1e-7.log"
    reference = load_plot_script(caffe_tools() / "plot_training_log.py", "plot_training_log_ref")
    ours = drawn(trainvisor.plot(log, tmp_path / "ours.png").figure)
    ours_by_label = {name: xy for lines in ours.values() for name, xy in lines.items()}
    for chart, ours_label in ((0, "accuracy test net 0"), (2, "loss test net 0"), (4, "lr train"),
                              (6, "total_loss train")):
        workdir = tmp_path / f"chart-{chart}"
        workdir.mkdir()
        monkeypatch.chdir(workdir)  # parse_log.sh writes its tables into the working directory
        (_, xlabel, _, lines), _ = draw(reference, chart, log, workdir / "chart.png")
        assert xlabel == "Iters" and len(lines) == 1
        x, y = ours_by_label[ours_label]
        np.testing.assert_array_equal(np.asarray(lines[0][0], float), x, err_msg=f"chart {chart}")
        np.testing.assert_array_equal(np.asarray(lines[0][1], float), y, err_msg=f"chart {chart}")


def plot_env(tmp_path: Path) -> dict[str, str]:
    """matplotlib's configuration of this test only: no user matplotlibrc, its caches in tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("MATPLOTLIBRC", "MPLBACKEND")}
    env["MPLCONFIGDIR"] = str(tmp_path / "mplconfig")
    return env


def test_the_command_writes_a_png_that_opens_with_a_panel_per_family(tmp_path):
    from matplotlib.image import imread

    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    out = tmp_path / "figures" / "mnist.png"  # its folder is made, as a metrics file's is
    done = subprocess.run(TRAINVISOR + ["plot", str(log), "-o", str(out)], env=plot_env(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"wrote {out}: 4 panels, 5 lines, x = iteration\n"
    pixels = imread(str(out))
    assert pixels.shape == (720, 1280, 4)  # 2 x 2 panels of 640 x 360
    rgb = pixels[:, :, :3]
    assert (rgb < 0.9).any(axis=2).mean() > 0.02, "the image is (almost) blank"
    blue = np.all(np.abs(rgb - np.array([0x1F, 0x77, 0xB4]) / 255) < 0.02, axis=2)  # the first line's colour
    assert blue.sum() > 500


@pytest.mark.parametrize("suffix, fmt_check", [(".svg", b"<svg"), (".pdf", b"%PDF")])
def test_the_suffix_names_the_format(suffix, fmt_check, tmp_path):
    log = real_logs("keras") / "kanji-keras1-verbose2-50ep.log"
    trainvisor.plot(log, tmp_path / f"k{suffix}")
    assert fmt_check in (tmp_path / f"k{suffix}").read_bytes()[:400]


def run_twice(tmp_path: Path, log: Path) -> Path:
    """Two starts of a fake Caffe printing `log` into one run directory: attempts 1 and 2."""
    run_dir = tmp_path / "run"
    for _ in range(2):
        subprocess.run(TRAINVISOR + ["run", "-q", "--run-dir", str(run_dir), "--parser", "caffe", "--",
                                     sys.executable, str(FAKE_CAFFE), str(log), "--no-snapshots"],
                       check=True, capture_output=True, timeout=120, cwd=tmp_path)
    return run_dir


def test_a_run_directory_draws_each_attempt_from_its_metrics_jsonl(tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    run_dir = run_twice(tmp_path, log)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    done = trainvisor.plot(run_dir, tmp_path / "run.png")
    assert done.source.kind == "run" and done.source.path == str(run_dir / "metrics.jsonl")
    assert done.figure.get_suptitle() == "run"  # the source's name, unless --title says otherwise
    got = drawn(done.figure)
    assert list(got["loss"]) == ["loss test net 0 attempt 1", "loss train attempt 1",
                                 "loss test net 0 attempt 2", "loss train attempt 2"]
    for attempt in (1, 2):
        mine = [r for r in records if r["attempt"] == attempt and r.get("name") == "loss" and r.get("phase") == "train"]
        assert len(mine) == 100
        x, y = got["loss"][f"loss train attempt {attempt}"]
        np.testing.assert_array_equal(x, [r["iteration"] for r in mine])
        np.testing.assert_array_equal(y, [r["value"] for r in mine])


def test_a_metrics_jsonl_draws_what_its_log_draws_and_a_cut_last_record_is_left_out(tmp_path):
    # mmdetection's own JSON log is JSON lines too, but not metric records: it is parsed as a log
    log = real_logs("mmdetection") / "mmdet2-faster-rcnn-12ep-json.log"
    jsonl = tmp_path / "metrics.jsonl"
    trainvisor.replay(log, metrics=jsonl, keep_events=False)
    from_log = trainvisor.plot(log, tmp_path / "log.png")
    from_jsonl = trainvisor.plot(jsonl, tmp_path / "jsonl.png", title="faster r-cnn")
    assert from_jsonl.figure.get_suptitle() == "faster r-cnn"
    assert (from_log.source.kind, from_jsonl.source.kind) == ("log", "jsonl")
    assert_same_lines(drawn(from_jsonl.figure), drawn(from_log.figure))
    text = jsonl.read_text()
    last = json.loads(text.splitlines()[-1])
    jsonl.write_text(text[: len(text) - 20])  # a run killed while writing its last record
    cut = drawn(trainvisor.plot(jsonl, tmp_path / "cut.png").figure)
    want = drawn(from_log.figure)
    panel, name = last["name"], label(last["name"], last["phase"])
    want[panel][name] = (want[panel][name][0][:-1], want[panel][name][1][:-1])
    assert_same_lines(cut, want)


def test_a_source_without_metrics_is_one_line_and_no_file(tmp_path, capsys):
    log = real_logs("caffe") / "ducha-adaadam-libcudart-error.log"
    out = tmp_path / "empty.png"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(log), "-o", str(out)])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == f"trainvisor: nothing to plot in {log}: no metrics found\n"
    assert not out.exists()


@pytest.mark.parametrize("out, said", [("a.jpg", "got '.jpg'"), ("plot", "got no suffix")])
def test_an_output_suffix_that_names_no_format_is_one_line(out, said, tmp_path, capsys):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(log), "-o", str(tmp_path / out)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"trainvisor: the output's suffix names its format: .png, .svg or .pdf, "
                                       f"{said} ({tmp_path / out})\n")
    assert list(tmp_path.iterdir()) == []


def test_an_axis_or_a_metric_the_log_lacks_is_one_line(tmp_path, capsys):
    d2 = real_logs("detectron2") / "bupt-d2-rpn-fpn-backbone-fpn.log"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(d2), "-o", str(tmp_path / "a.png"), "--x", "epoch"])
    assert exit_info.value.code == 1
    assert capsys.readouterr().err == (f"trainvisor: nothing to plot in {d2}: no value to plot has an epoch; "
                                       f"try --x iteration\n")
    hf = real_logs("huggingface") / "eshaubale-hf-trainer-padded.log"
    with pytest.raises(SystemExit) as exit_info:
        main(["plot", str(hf), "-o", str(tmp_path / "a.png"), "--metric", "bleu"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("trainvisor: no metric named bleu; there are: f1, learning_rate, loss, "
                                       "runtime, samples_per_second, steps_per_second\n")
    assert list(tmp_path.iterdir()) == []


def test_metric_names_a_family_and_epoch_is_the_x_on_request(tmp_path, capsys):
    hf = real_logs("huggingface") / "eshaubale-hf-trainer-padded.log"
    main(["plot", str(hf), "-o", str(tmp_path / "loss.png"), "--metric", "loss", "--x", "epoch"])
    assert capsys.readouterr().err == f"wrote {tmp_path / 'loss.png'}: 1 panel, 3 lines, x = epoch\n"
    done = trainvisor.plot(hf, tmp_path / "loss.png", metrics=["loss"], x="epoch")
    metrics = trainvisor.replay(hf).metrics
    assert_same_lines(drawn(done.figure), {"loss": {
        label(*m): series(metrics, *m, x="epoch") for m in (("loss", "train"), ("loss", "val"), ("train_loss", "train"))}})


def test_running_values_are_left_out_unless_asked_for_then_lines_of_their_own(tmp_path):
    # Keras 3's step lines: 2,880 running loss values inside the epochs, 60 epoch-end ones
    log = real_logs("keras") / "keras3-utf16le-ansi.log"
    metrics = trainvisor.replay(log).metrics
    plain = drawn(trainvisor.plot(log, tmp_path / "a.png", metrics=["loss"]).figure)
    assert list(plain["loss"]) == ["loss train", "loss val"]
    with_running = drawn(trainvisor.plot(log, tmp_path / "b.png", metrics=["loss"], running=True).figure)
    assert list(with_running["loss"]) == ["loss train running", "loss train", "loss val"]
    x, y = with_running["loss"]["loss train running"]
    assert len(x) == 2880
    want_x, want_y = series(metrics, "loss", "train", running=True)
    np.testing.assert_array_equal(x, want_x)
    np.testing.assert_array_equal(y, want_y)


def test_each_rank_is_a_line_of_its_own(tmp_path):
    # torchrun --tee: two ranks print their losses and test results, each line labelled
    log = FIXTURES / "logs" / "ranks-torchrun-tee.log"
    done = trainvisor.plot(log, tmp_path / "r.png", ranks="all")
    metrics = trainvisor.replay(log, ranks="all").metrics

    def of(name, phase, rank):
        return series([m for m in metrics if m.rank == rank], name, phase)

    assert_same_lines(drawn(done.figure), {
        "loss": {f"loss {phase} rank {rank}": of("loss", phase, rank) for phase in ("train", "test") for rank in (0, 1)},
        "accuracy": {f"accuracy test rank {rank}": of("accuracy", "test", rank) for rank in (0, 1)}})


def test_without_matplotlib_the_command_names_the_extra(tmp_path):
    log = real_logs("caffe") / "bearpaw-fork-mnist.log"
    code = ("import sys; sys.modules['matplotlib'] = None; from trainvisor.cli import main; "
            f"main(['plot', {str(log)!r}, '-o', {str(tmp_path / 'a.png')!r}])")
    done = subprocess.run([sys.executable, "-c", code], env=plot_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr) == (2, "trainvisor: plotting needs matplotlib: pip install trainvisor[plot]\n")


def test_the_figure_is_made_without_pyplot(tmp_path):
    """No pyplot: nothing is added to its global figures, no GUI backend is chosen."""
    log = real_logs("keras") / "kanji-keras1-verbose2-50ep.log"
    code = (f"import sys, trainvisor; trainvisor.plot({str(log)!r}, {str(tmp_path / 'a.png')!r}); "
            "print('matplotlib.pyplot' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], env=plot_env(tmp_path), capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stdout) == (0, "False\n"), done.stderr
