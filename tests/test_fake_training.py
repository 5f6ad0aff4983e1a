"""`trainvisor fake-training LOG`: a saved log played as its training did (checkpoint files,
signals, exit). That every real log's bytes pass through a run of it unchanged, with the records
a replay gives, is tests/test_run_replay.py's; here: the files, the signals, the exits."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from trainvisor.testing.faketrain.plan import make_plan, split_lines
from trainvisor.testing.faketrain.resume import resume_plan

from .conftest import FIXTURES, real_logs

ANNOUNCED = FIXTURES / "logs" / "announcements"
LENET = FIXTURES / "logs" / "lenet-newyear.log"


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("name, files", [
    ("huggingface.log", [f"out/{d}{f}" for d in ("checkpoint-1000/", "checkpoint-500/", "")
                         for f in ("model.safetensors", "optimizer.pt", "trainer_state.json")]),
    ("keras.log", ["ckpt/best.keras", "ckpt/weights.03.weights.h5"]),
    ("keras2.log", ["ckpt/weights.01-0.40.h5", "ckpt/weights.02-0.35.h5"]),
    # an absolute path is re-rooted under the snapshot directory: a fake never writes outside it
    ("lightning.log", ["ckpts/epoch=2.ckpt", "tmp/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt"]),
    ("mmengine.log", ["data/work_dirs/rtmdet_tiny/epoch_1.pth", "data/work_dirs/rtmdet_tiny/iter_200.pth"]),
    ("yolo.log", ["runs/detect/train/weights/best.pt", "runs/detect/train/weights/last.pt"]),
])
def test_writes_the_checkpoints_each_framework_announces(name, files, tmp_path, fake_training):
    done = subprocess.run(fake_training(ANNOUNCED / name, snapshot_size=300), cwd=tmp_path, capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert files_under(tmp_path) == sorted(files)
    assert {(tmp_path / f).stat().st_size for f in files} == {300}


def test_tensorflow_checkpoint_prefix_is_written_as_its_three_files(tmp_path, fake_training):
    log = real_logs("tensorflow") / "bert-similarity-estimator.log"
    subprocess.run(fake_training(log, snapshot_dir=tmp_path / "snap"), capture_output=True, timeout=60, check=True)
    result = tmp_path / "snap" / "home/amei/Worspace/bert-utils/tmp/result"
    assert sorted(p.name for p in result.iterdir() if p.name.startswith("model.ckpt-399.")) == [
        "model.ckpt-399.data-00000-of-00001", "model.ckpt-399.index", "model.ckpt-399.meta"]
    assert len(list(result.iterdir())) == 15 * 3  # the 15 saves the log announces


def read_lines_with_files(proc: subprocess.Popen, stream, root: Path, wanted: str) -> dict[str, bool]:
    """For each line holding `wanted`: whether the file it names existed when the line was read."""
    seen = {}
    for raw in stream:
        if wanted.encode() in raw:
            name = raw.split(wanted.encode(), 1)[1].strip().strip(b'"').split(b",")[0].decode()
            seen[name] = (root / name).exists()
    proc.wait(timeout=60)
    return seen


def test_mxnet_params_exist_before_their_saved_line(tmp_path, fake_training):
    """MXNet prints ``Saved checkpoint to`` after writing the file: a reader of the line finds it."""
    log = real_logs("mxnet") / "ouyangchao-mxnet-cls.log"
    with subprocess.Popen(fake_training(log), cwd=tmp_path, stderr=subprocess.PIPE) as proc:
        seen = read_lines_with_files(proc, proc.stderr, tmp_path, "Saved checkpoint to ")
    assert seen == {f"models/img_cls-{i:04d}.params": True for i in range(1, 11)}


def test_caffe_snapshots_are_written_by_the_next_line(tmp_path, fake_training):
    """Caffe announces a snapshot, then writes it: the next line of the log proves it is there."""
    with subprocess.Popen(fake_training(LENET), cwd=tmp_path, stderr=subprocess.PIPE) as proc:
        announced, proven = None, []
        for raw in proc.stderr:
            if announced is not None:
                proven.append((announced, (tmp_path / announced).is_file()))
            announced = raw.rsplit(b" ", 1)[1].strip().decode() if b"Snapshotting" in raw else None
    assert proc.returncode == 0
    assert proven == [(f"examples/mnist/lenet_iter_{i}.{ext}", True)
                      for i in (250, 500, 750, 1000) for ext in ("caffemodel", "solverstate")]


def started(argv: list[str], cwd: Path, log_bytes: bytes, stream: str) -> subprocess.Popen:
    """The fake child, once it has printed all of `log_bytes` (it lingers after them)."""
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        fd = (proc.stderr if stream == "stderr" else proc.stdout).fileno()
        got = b""
        while len(got) < len(log_bytes):
            chunk = os.read(fd, len(log_bytes) - len(got))
            assert chunk, f"the fake ended early: {got[-200:]!r}"
            got += chunk
        assert got == log_bytes
    except BaseException:
        with proc:  # no child left behind by a failed start
            proc.kill()
        raise
    return proc


@pytest.fixture
def lenet_to_400(tmp_path) -> Path:
    """The fixture log's first 54 lines: the last metric is of iteration 400."""
    log = tmp_path / "lenet-400.log"
    log.write_bytes(b"".join(LENET.read_bytes().splitlines(keepends=True)[:54]))
    return log


def test_caffe_on_sigint_snapshots_the_current_iteration_and_exits_0(lenet_to_400, tmp_path, fake_training,
                                                                     replay_log):
    with started(fake_training(lenet_to_400, linger=60), tmp_path, lenet_to_400.read_bytes(), "stderr") as proc:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == b""
    assert err.decode().splitlines() == [
        "I1231 23:59:20.108387  4242 solver.cpp:454] Snapshotting to binary proto file examples/mnist/lenet_iter_400.caffemodel",
        "I1231 23:59:20.108387  4242 solver.cpp:454] Snapshotting solver state to binary proto file "
        "examples/mnist/lenet_iter_400.solverstate",
        "I1231 23:59:20.108387  4242 solver.cpp:327] Optimization stopped early.",
    ]
    assert (tmp_path / "examples/mnist/lenet_iter_400.caffemodel").is_file()
    tail = tmp_path / "tail.log"
    tail.write_bytes(err)
    assert [(c.kind, c.path) for c in replay_log(tail, parser="caffe").checkpoints] == [
        ("weights", "examples/mnist/lenet_iter_400.caffemodel"),
        ("solverstate", "examples/mnist/lenet_iter_400.solverstate")]


def test_caffe_on_sighup_snapshots_and_goes_on(lenet_to_400, tmp_path, fake_training):
    with started(fake_training(lenet_to_400, linger=60), tmp_path, lenet_to_400.read_bytes(), "stderr") as proc:
        proc.send_signal(signal.SIGHUP)
        line = proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert line.endswith(b"Snapshotting to binary proto file examples/mnist/lenet_iter_400.caffemodel\n")
    assert proc.returncode == -signal.SIGTERM
    assert b"*** SIGTERM (@0x0) received by PID" in err  # glog's failure handler, as the real LAB log ends


def test_python_framework_on_sigint_prints_the_traceback_and_dies_of_it(tmp_path, fake_training):
    log = real_logs("keras") / "kanji-keras1-verbose2-earlystop.log"
    with started(fake_training(log, linger=60), tmp_path, log.read_bytes(), "stdout") as proc:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT and out == b""
    assert err.startswith(b"Traceback (most recent call last):\n") and err.endswith(b"\nKeyboardInterrupt\n")


def test_lightning_on_sigint_shuts_down_gracefully_with_exit_1(tmp_path, fake_training):
    log = real_logs("lightning") / "wandb-lightning-progress.log"
    with started(fake_training(log, linger=60), tmp_path, log.read_bytes(), "stdout") as proc:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == b""  # its bars on stdout, its logger's message on stderr
    assert err == b"\nDetected KeyboardInterrupt, attempting graceful shutdown ...\n"


@pytest.mark.parametrize("options, returncode", [({"exit_code": 3}, 3), ({"die_by_signal": "SEGV"}, -signal.SIGSEGV),
                                                  ({"die_by_signal": "kill"}, -signal.SIGKILL)])
def test_exits_as_asked(options, returncode, tmp_path, fake_training):
    done = subprocess.run(fake_training(LENET, snapshots=False, **options), cwd=tmp_path, capture_output=True,
                          timeout=60)
    assert done.returncode == returncode and done.stderr == LENET.read_bytes()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args, message", [
    (["missing.log"], "trainvisor: cannot read missing.log: No such file or directory\n"),
    ([str(LENET), "--die-by-signal", "NOPE"], "trainvisor: --die-by-signal: no signal named 'NOPE'\n"),
])
def test_bad_input_is_one_line(args, message, tmp_path):
    done = subprocess.run([sys.executable, "-m", "trainvisor", "fake-training", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (2, "", message)  # a ConfigError: exit 2


def test_a_framework_named_is_played_and_an_unknown_one_refused(tmp_path, fake_training):
    """`--framework keras` sends a Caffe log to stdout (where Keras prints) and reads its saves
    with the Keras parser, which finds none in it."""
    done = subprocess.run(fake_training(LENET, framework="keras"), cwd=tmp_path, capture_output=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, LENET.read_bytes(), b"")
    assert list(tmp_path.iterdir()) == []
    bad = subprocess.run(fake_training(LENET, framework="nope"), cwd=tmp_path, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and bad.stderr.startswith("trainvisor: no framework named 'nope' (one of: caffe, ")


@given(st.binary(max_size=300))
def test_a_log_is_cut_after_each_newline_into_pieces_that_join_to_its_bytes(raw):
    pieces = split_lines(raw)
    assert b"".join(pieces) == raw
    if not raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        assert len(pieces) == raw.count(b"\n") + (not raw.endswith(b"\n") and raw != b"")
        assert all(p.endswith(b"\n") for p in pieces[:-1])


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=100), st.sampled_from(["le", "be"]))
def test_a_utf16_log_is_cut_at_its_own_newlines(text, order):
    raw = (b"\xff\xfe" if order == "le" else b"\xfe\xff") + text.encode(f"utf-16-{order}")
    pieces = split_lines(raw)
    assert b"".join(pieces) == raw
    assert len(pieces) == max(1, text.count("\n") + (not text.endswith("\n")))


def test_a_run_stopping_the_fake_caffe_gets_its_sigint_snapshot(tmp_path, fake_training):
    """`Run.request_stop` sends SIGINT: the fake Caffe snapshots the iteration it reached, the run
    parses that announcement live, and the training exits 0 (Caffe's `-sigint_effect stop`)."""
    from trainvisor import Run, RunConfig
    from trainvisor.config import LoggingConfig, ParsingConfig, ProcessConfig, RunDirConfig
    from trainvisor.run.summary import EXIT_STOPPED

    config = RunConfig(command=tuple(fake_training(LENET, rate=400, linger=60, snapshot_dir=tmp_path / "snap")),
                       process=ProcessConfig(cwd=str(tmp_path), kill_timeout=10), parsing=ParsingConfig(year=2026),
                       logging=LoggingConfig(quiet=True), run=RunDirConfig(dir=str(tmp_path / "run")))

    def hook(record) -> None:
        if "Iteration 300," in record.text:
            run.request_stop("enough")
    run = Run(config, hooks=[hook], stdout_fd=None, stderr_fd=None)
    summary = run.run()
    assert (summary.exit_code, summary.returncode, summary.stop_reason) == (EXIT_STOPPED, 0, "enough")
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    reached = max(r["iteration"] for r in records if "event" not in r)  # the last metric the child printed
    assert 300 <= reached < 1000
    saved = [r["path"] for r in records if r.get("event") == "checkpoint"]
    assert saved[-2:] == [f"examples/mnist/lenet_iter_{reached}.caffemodel",
                          f"examples/mnist/lenet_iter_{reached}.solverstate"]
    assert (tmp_path / "snap" / saved[-1]).is_file()


def test_a_sigint_snapshot_after_a_log_cut_mid_line_starts_on_its_own_line(tmp_path, fake_training):
    log = tmp_path / "cut.log"
    log.write_bytes(LENET.read_bytes()[:LENET.read_bytes().index(b"Iteration 450 (") + 9])  # ends "Iteration"
    with started(fake_training(log, linger=60), tmp_path, log.read_bytes(), "stderr") as proc:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    # the time and pid of the cut line, which names no metric yet: the snapshot is of iteration 400
    assert err.startswith(b"\nI1231 23:59:30.108649  4242 solver.cpp:454] Snapshotting to binary proto file "
                          b"examples/mnist/lenet_iter_400.caffemodel\n")


def test_caffe_resumed_at_a_tested_iteration_prints_that_test_from_its_first_line():
    """Caffe tests at iteration N right after writing the snapshot of N, and `caffe train -snapshot`
    of that state tests N again (Solver::Step tests whenever iter_ % test_interval == 0), its
    "Iteration N, Testing net" line first: without it a parser reads the test's outputs as of no
    iteration. The resumed play is the log's header, then the log from that line on."""
    plan = make_plan(LENET, framework="caffe")
    resumed = resume_plan(plan, "examples/mnist/lenet_iter_250.solverstate")
    at = next(i for i, line in enumerate(plan.lines) if b"] Iteration 250, Testing net (#0)" in line)
    tail = plan.lines[at:]
    assert resumed.lines[-len(tail):] == tail
    assert not any(b"] Iteration " in line for line in resumed.lines[:-len(tail)])
    assert b"caffe.cpp:251] Resuming from examples/mnist/lenet_iter_250.solverstate\n" in b"".join(resumed.lines)
