"""Metric files followed as sources (`--follow GLOB`): what `MetricFiles.sweep` reads from real files
written as frameworks write them: mmdetection's real *.log.json written in pieces, a CSV written in
pieces, Lightning's own CSVLogger rewriting metrics.csv with a wider header (no row twice), files
and their directories appearing late, a trainer_state.json rewritten in place, and a run started
again on its directory going on after what it reported. Sweeps are called directly (no clock,
no waiting); the follower's thread only where its start and stop are what is tested."""
from __future__ import annotations

import csv
import json
import shutil

import pytest

from trainvisor.events import Metric
from trainvisor.run.follow import MetricFiles, reported_lines
from trainvisor.stream.source import Records

from .conftest import real_logs

MODES = {"train": "train", "val": "val"}


def metrics_of(records: list[Records]) -> list[Metric]:
    for r in records:
        assert all(m.stream == r.source for m in r.events)
    return [m for r in records for m in r.events]


def rows(metrics) -> list[tuple]:
    return [(m.name, m.phase, m.epoch, m.iteration, m.value, m.line, m.stream) for m in metrics]


def expected_mmdet(lines: list[str], source: str) -> list[tuple]:
    """What the JSON itself holds: each number of each record that names an epoch, in key order,
    phase from its `mode`."""
    want = []
    for number, text in enumerate(lines, 1):
        record = json.loads(text)
        if "epoch" not in record:
            continue
        for key, value in record.items():
            if key not in ("epoch", "iter", "mode") and isinstance(value, (int, float)):
                want.append((key, MODES[record["mode"]], float(record["epoch"]), record["iter"], float(value),
                             number, source))
    return want


def test_mmdetections_real_log_json_written_in_pieces_every_value_once_at_its_line(tmp_path):
    data = (real_logs("mmdetection") / "mmdet2-faster-rcnn-12ep-json.log").read_bytes()
    lines = data.decode().splitlines()
    work = tmp_path / "work_dirs"
    files = MetricFiles(["work_dirs/*.log.json"], cwd=str(tmp_path), wall_clock=lambda: 7.0)
    assert files.sweep() == []  # neither the directory nor the file exists yet
    work.mkdir()
    out = work / "20200720_054407.log.json"
    cut = data.index(b'"loss_cls"', len(data) // 2)  # in the middle of a record
    out.write_bytes(data[:cut])
    first = metrics_of(files.sweep())
    out.write_bytes(data)
    second = metrics_of(files.sweep(final=True))
    source = "file:work_dirs/20200720_054407.log.json"
    whole_before_cut = data[:cut].count(b"\n")
    want = expected_mmdet(lines, source)
    assert rows(first) == [w for w in want if w[5] <= whole_before_cut]
    assert rows(first + second) == want
    assert len(want) == 84 * 10 + 12 * 7 and {w[1] for w in want} == {"train", "val"}  # 84 train records, 12 val
    assert all(m.wall_time == 7.0 and not m.running for m in first + second)
    assert files.sweep(final=True) == []  # nothing new: nothing twice


def write_csv(path, header, rows_, mode="w"):
    with open(path, mode, newline="") as fh:
        writer = csv.writer(fh)
        if header:
            writer.writerow(header)
        writer.writerows(rows_)


def test_a_csv_written_in_pieces_each_row_once_whole_lines_only(tmp_path):
    (tmp_path / "runs").mkdir()
    path = tmp_path / "runs" / "results.csv"
    # Ultralytics pads its header's names and its cells
    path.write_text("      epoch,  train/box_loss,  metrics/mAP50(B)\n         1,         1.25,   0.1")
    files = MetricFiles(["runs/results.csv"], cwd=str(tmp_path))
    assert metrics_of(files.sweep()) == []  # the first row has no newline yet
    with open(path, "a") as fh:
        fh.write("25\n         2,        1.125,\n")
    got = rows(metrics_of(files.sweep()))
    src = "file:runs/results.csv"
    assert got == [("box_loss", "train", 1.0, None, 1.25, 2, src),
                   ("metrics/mAP50(B)", "train", 1.0, None, 0.125, 2, src),
                   ("box_loss", "train", 2.0, None, 1.125, 3, src)]
    assert files.sweep() == [] and files.sweep(final=True) == []


def test_lightnings_csvlogger_rewriting_metrics_csv_with_a_wider_header_reports_no_row_twice(tmp_path):
    """Lightning's own writer (no training): a column that comes late makes it rewrite the file
    with the rows it wrote before, then append the new ones."""
    loggers = pytest.importorskip("lightning.fabric.loggers", reason="lightning is installed by `make test`")
    logger = loggers.CSVLogger(str(tmp_path / "lightning_logs"), name="", flush_logs_every_n_steps=1000)
    files = MetricFiles(["lightning_logs/*/metrics.csv"], cwd=str(tmp_path))
    logged = []
    for step, metrics in enumerate([{"epoch": 0, "train_loss": 0.75}, {"epoch": 0, "train_loss": 0.5},
                                    {"epoch": 0, "val_acc": 0.625, "val_loss": 0.375},  # two new columns
                                    {"epoch": 1, "train_loss": 0.25}]):
        logger.log_metrics(metrics, step=step)
        logger.save()
        logged.append(metrics_of(files.sweep()))
    path = tmp_path / "lightning_logs" / "version_0" / "metrics.csv"
    with open(path, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["epoch", "step", "train_loss", "val_acc", "val_loss"]  # rewritten wider
    src = "file:lightning_logs/version_0/metrics.csv"
    want = [(col.split("_")[1], col.split("_")[0], float(row["epoch"]), int(row["step"]), float(row[col]), n, src)
            for n, row in enumerate(table, 2) for col in ("train_loss", "val_acc", "val_loss") if row[col]]
    assert rows(m for batch in logged for m in batch) == want
    assert [len(batch) for batch in logged] == [1, 1, 2, 1]  # each sweep: only what that save added


def test_a_file_rewritten_while_being_read_is_read_again_past_what_was_reported(tmp_path):
    """The moment Lightning has truncated metrics.csv and written part of it again: fewer rows than
    were reported; the next sweep goes on from the first row not reported."""
    path = tmp_path / "metrics.csv"
    write_csv(path, ["epoch", "step", "train_loss"], [[0, 1, 0.5], [0, 2, 0.25]])
    files = MetricFiles(["*.csv"], cwd=str(tmp_path))
    assert [m.value for m in metrics_of(files.sweep())] == [0.5, 0.25]
    write_csv(path, ["epoch", "step", "train_loss", "val_loss"], [[0, 1, 0.5, ""]])
    assert files.sweep() == []
    write_csv(path, None, [[0, 2, 0.25, ""], [0, 2, "", 0.125], [1, 3, 0.0625, ""]], mode="a")
    assert rows(metrics_of(files.sweep())) == [("loss", "val", 0.0, 2, 0.125, 4, "file:metrics.csv"),
                                               ("loss", "train", 1.0, 3, 0.0625, 5, "file:metrics.csv")]


def test_files_and_directories_appearing_late_are_followed_and_the_run_dir_never(tmp_path):
    files = MetricFiles(["**/metrics.json"], cwd=str(tmp_path), exclude=[str(tmp_path / "r")])
    assert files.sweep() == []
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "metrics.json").write_text('{"iteration": 1, "loss": 9.0}\n')
    (tmp_path / "output" / "a").mkdir(parents=True)
    (tmp_path / "output" / "a" / "metrics.json").write_text(
        '{"iteration": 19, "loss_cls": 0.5, "lr": 0.01, "bbox": {"AP": 31.5}}\n{"iteration": 39, "val_loss": 0.25}')
    got = rows(metrics_of(files.sweep()))
    src = "file:output/a/metrics.json"
    assert got == [("loss_cls", "train", None, 19, 0.5, 1, src), ("lr", "train", None, 19, 0.01, 1, src),
                   ("bbox/AP", "train", None, 19, 31.5, 1, src)]
    assert rows(metrics_of(files.sweep(final=True))) == [("loss", "val", None, 39, 0.25, 2, src)]
    assert [f.source for f in files.files] == [src]


def test_a_trainer_state_json_rewritten_in_place_gives_its_new_log_history_entries(tmp_path):
    ckpt = tmp_path / "out" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    state = {"global_step": 10, "log_history": [{"epoch": 0.5, "grad_norm": 1.5, "learning_rate": 5e-05,
                                                 "loss": 0.75, "step": 10}]}
    (ckpt / "trainer_state.json").write_text(json.dumps(state))
    files = MetricFiles(["out/*/trainer_state.json"], cwd=str(tmp_path))
    first = rows(metrics_of(files.sweep()))
    src = "file:out/checkpoint-10/trainer_state.json"
    assert first == [("grad_norm", "train", 0.5, 10, 1.5, 1, src), ("learning_rate", "train", 0.5, 10, 5e-05, 1, src),
                     ("loss", "train", 0.5, 10, 0.75, 1, src)]
    (ckpt / "trainer_state.json").write_text(json.dumps(state)[:40])  # half written
    assert files.sweep() == []
    state["log_history"].append({"epoch": 1.0, "eval_loss": 0.625, "step": 20})
    (ckpt / "trainer_state.json").write_text(json.dumps(state, indent=2))
    assert rows(metrics_of(files.sweep())) == [("loss", "val", 1.0, 20, 0.625, 2, src)]


def test_a_run_started_again_goes_on_after_the_lines_its_metrics_file_holds(tmp_path):
    path = tmp_path / "metrics.csv"
    write_csv(path, ["epoch", "step", "train_loss"], [[0, 1, 0.5], [0, 2, 0.25]])
    jsonl = tmp_path / "r" / "metrics.jsonl"
    jsonl.parent.mkdir()
    first = MetricFiles(["metrics.csv"], cwd=str(tmp_path))
    with open(jsonl, "w") as fh:
        fh.write(json.dumps({"name": "loss", "value": 1.0, "line": 9, "stream": "stdout"}) + "\n")
        for m in metrics_of(first.sweep()):
            fh.write(json.dumps(m.to_json_dict()) + "\n")
    assert reported_lines(jsonl) == {"file:metrics.csv": 3}
    write_csv(path, None, [[1, 3, 0.125]], mode="a")
    again = MetricFiles(["metrics.csv"], cwd=str(tmp_path), done=lambda: reported_lines(jsonl))
    assert rows(metrics_of(again.sweep())) == [("loss", "train", 1.0, 3, 0.125, 4, "file:metrics.csv")]


def test_a_copy_of_the_real_log_beside_a_file_that_is_no_json_gives_only_json_records(tmp_path):
    src = real_logs("mmdetection") / "mmdet2-faster-rcnn-12ep-json.log"
    shutil.copy(src, tmp_path / "a.log.json")
    (tmp_path / "b.log.json").write_text("not json\n[1, 2]\n")
    got = metrics_of(MetricFiles(["*.log.json"], cwd=str(tmp_path)).sweep(final=True))
    assert {m.stream for m in got} == {"file:a.log.json"}
    assert rows(got) == expected_mmdet(src.read_text().splitlines(), "file:a.log.json")


def test_followed_records_go_to_every_sink_but_the_timeline_which_reads_the_console(tmp_path):
    from trainvisor.parsers import ParserOptions, create_parser
    from trainvisor.sinks.stats import StatsSink
    from trainvisor.stream.engine import StreamEngine
    from trainvisor.stream.pipeline import Pipeline
    from trainvisor.stream.source import Chunk, End, Eof
    from trainvisor.timeline.runner import TimelineSink

    write_csv(tmp_path / "metrics.csv", ["epoch", "step", "train_loss"], [[0, 9, 0.5], [1, 19, 0.25]])
    (records,) = MetricFiles(["metrics.csv"], cwd=str(tmp_path)).sweep()
    timeline_events: list = []
    stats = StatsSink()
    pipeline = Pipeline(create_parser("generic", ParserOptions(year=2026)),
                        sinks=[stats, TimelineSink(timeline_events.extend)])
    line = b"epoch=5 loss=0.125\n"
    StreamEngine(pipeline).drive([Chunk("stdout", line, 0.0, 0.0), records, Eof("stdout"), End()])
    pipeline.finish()
    assert stats.metrics == 3 and pipeline.stats.events == 3  # the console's one and the file's two
    assert [(e.epoch, dict(e.values)) for e in timeline_events if type(e).__name__ == "EpochEnd"] == \
        [(5, {"train/loss": 0.125})]


def test_each_checkpoints_trainer_state_json_gives_only_the_entries_no_earlier_one_gave(tmp_path):
    """The Trainer writes the whole history so far into each checkpoint-N/: an entry once."""
    history = [{"epoch": 0.5, "loss": 0.75, "step": 10}, {"epoch": 1.0, "loss": 0.5, "step": 20},
               {"epoch": 1.0, "eval_loss": 0.625, "step": 20}]
    files = MetricFiles(["out/*/trainer_state.json"], cwd=str(tmp_path))
    got = []
    for step, upto in ((10, 1), (20, 3)):
        (tmp_path / "out" / f"checkpoint-{step}").mkdir(parents=True)
        (tmp_path / "out" / f"checkpoint-{step}" / "trainer_state.json").write_text(
            json.dumps({"global_step": step, "log_history": history[:upto]}))
        got += rows(metrics_of(files.sweep()))
    assert got == [("loss", "train", 0.5, 10, 0.75, 1, "file:out/checkpoint-10/trainer_state.json"),
                   ("loss", "train", 1.0, 20, 0.5, 2, "file:out/checkpoint-20/trainer_state.json"),
                   ("loss", "val", 1.0, 20, 0.625, 3, "file:out/checkpoint-20/trainer_state.json")]


def test_a_follower_whose_globs_matched_nothing_says_so_once_and_its_last_sweep_reads_all(tmp_path, caplog):
    from trainvisor.run.follow import MetricFollower

    put: list[Records] = []
    follower = MetricFollower(MetricFiles(["out/metrics.json"], cwd=str(tmp_path)), interval=3600)
    with caplog.at_level("WARNING", logger="trainvisor"):
        follower.start(put.append)
        follower.stop()
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "metrics.json").write_text('{"iteration": 1, "loss": 0.5}\n{"iteration": 2, "loss": 0.25}')
        follower.start(put.append)  # a restarted child: the same files, their counts go on
        follower.stop()  # the last sweep, the thread never having looked: the unfinished last line too
    assert [r.message for r in caplog.records] == [f"--follow out/metrics.json: no file matched (under {tmp_path})"]
    assert [(m.iteration, m.value, m.line) for r in put for m in r.events] == [(1, 0.5, 1), (2, 0.25, 2)]


def test_a_last_line_taken_at_a_childs_end_and_then_ended_by_a_restarted_one_is_one_line(tmp_path):
    path = tmp_path / "metrics.json"
    path.write_text('{"iteration": 1, "loss": 0.5}')
    files = MetricFiles(["metrics.json"], cwd=str(tmp_path))
    assert [(m.value, m.line) for m in metrics_of(files.sweep(final=True))] == [(0.5, 1)]
    with open(path, "a") as fh:
        fh.write('\n{"iteration": 2, "loss": 0.25}\n')
    assert [(m.value, m.line) for m in metrics_of(files.sweep())] == [(0.25, 2)]
