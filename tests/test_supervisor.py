"""Process supervision: exit codes, signals, the process tree, hostile output."""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from trainvisor import Supervisor, supervise
from trainvisor.errors import CommandNotExecutable, CommandNotFound
from trainvisor.run.endwarnings import no_metrics_warning

from .caffe_helpers import Collect
from .conftest import FAKE_CAFFE, FIXTURES
from .test_process_tree import is_death_watcher, wait_for

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
PY = sys.executable
LOG = FIXTURES / "logs" / "lenet-newyear.log"


def run_cli(args, tmp_path, **kw):
    return subprocess.run(TRAINVISOR + ["run", "--run-dir", str(tmp_path / "run"), *args],
                          capture_output=True, cwd=tmp_path, timeout=60, **kw)


@pytest.mark.parametrize("child_args, expected", [
    (["--exit-code", "0"], 0),
    (["--exit-code", "3"], 3),
    (["--die-by", "KILL"], 137),
    (["--die-by", "SEGV"], 139),
])
def test_exit_status_is_the_childs(child_args, expected, tmp_path):
    proc = run_cli(["--", PY, str(FAKE_CAFFE), str(LOG), "--no-snapshots", *child_args], tmp_path)
    assert proc.returncode == expected
    assert proc.stderr == LOG.read_bytes()


def test_missing_command_exits_127_with_one_line(tmp_path):
    proc = run_cli(["--", "no-such-command-xyz"], tmp_path)
    assert proc.returncode == 127
    assert proc.stderr == b"trainvisor: no-such-command-xyz: command not found\n"


def test_non_executable_command_exits_126(tmp_path):
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    proc = run_cli(["--", str(script)], tmp_path)
    assert proc.returncode == 126
    assert proc.stderr == f"trainvisor: {script}: permission denied\n".encode()


def test_shell_option_runs_through_sh(tmp_path):
    proc = run_cli(["--shell", "--", "echo a && echo b >&2; exit 4"], tmp_path)
    # two lines and no metric in them: trainvisor says so after the training's own stderr
    said = f"trainvisor: {no_metrics_warning(2, 'auto')}\n".encode()
    assert (proc.returncode, proc.stdout, proc.stderr) == (4, b"a\n", b"b\n" + said)


def test_sigterm_ends_a_child_that_ignores_it_and_its_whole_tree(tmp_path):
    # The child ignores SIGTERM and has a grandchild that ignores it too.
    proc = subprocess.Popen(
        TRAINVISOR + ["run", "--kill-timeout", "1", "--run-dir", str(tmp_path / "run"), "--",
                      PY, str(FAKE_CAFFE), str(LOG), "--no-snapshots", "--ignore-sigterm", "--spawn-grandchild",
                      "--sleep-at-end", "60"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path,
    )
    try:
        # The whole log passed through: the child runs (its grandchild started first), and
        # trainvisor's handlers are in (they go in before its readers start).
        assert proc.stderr.read(len(LOG.read_bytes())) == LOG.read_bytes()
        tree = [p for p in psutil.Process(proc.pid).children(recursive=True) if not is_death_watcher(p)]
        assert len(tree) >= 2, "child and grandchild should be running"
        wait_for(lambda: all(_ignores_sigterm(p.pid) for p in tree), 10, "child and grandchild to ignore SIGTERM")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=15)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stderr.close()
    assert rc == 137  # the child died of SIGKILL after the kill timeout
    assert 0.9 <= elapsed < 6.0
    gone, alive = psutil.wait_procs(tree, timeout=3)
    assert alive == []


def _ignores_sigterm(pid: int) -> bool:
    """The process's SIGTERM disposition is SIG_IGN (the SigIgn mask of /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            mask = next(int(x.split()[1], 16) for x in fh if x.startswith("SigIgn:"))
    except (OSError, StopIteration):
        return False
    return bool(mask & (1 << (signal.SIGTERM - 1)))


def test_usr1_is_forwarded_to_the_child(tmp_path):
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGUSR1, lambda *a: (print('got USR1', flush=True), sys.exit(5)))\n"
            "print('ready', flush=True)\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen(TRAINVISOR + ["run", "--run-dir", str(tmp_path / "run"), "--", PY, "-c", code],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        assert proc.stdout.readline() == b"ready\n"
        proc.send_signal(signal.SIGUSR1)
        out, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (proc.returncode, out) == (5, b"got USR1\n")


def test_a_raising_hook_is_logged_counted_and_stops_nothing(caplog):
    seen = []

    def broken_hook(record):
        raise RuntimeError("boom")

    def counting_hook(record):
        seen.append((record.stream, record.number, record.text))

    sink = Collect()
    with caplog.at_level(logging.ERROR, logger="trainvisor"):
        result = supervise([PY, str(FAKE_CAFFE), str(LOG), "--no-snapshots"], hooks=[broken_hook, counting_hook],
                           sinks=[sink], stdout_fd=None, stderr_fd=None, forward_signals=False)
    n_lines = LOG.read_bytes().count(b"\n")
    assert result.exit_code == 0
    assert result.faults == {"hook broken_hook": n_lines}
    assert len(seen) == n_lines and seen[0] == ("stderr", 1, LOG.read_text().splitlines()[0])
    assert len(sink.metrics) == 91  # parsing went on
    assert "hook broken_hook failed: RuntimeError: boom" in caplog.text


def test_a_raising_sink_does_not_stop_the_run_or_other_sinks():
    class BrokenSink(Collect):
        name = "broken"

        def write(self, events):
            raise OSError("disk full")

    good = Collect()
    result = supervise([PY, str(FAKE_CAFFE), str(LOG), "--no-snapshots"], sinks=[BrokenSink(), good],
                       stdout_fd=None, stderr_fd=None, forward_signals=False)
    assert result.exit_code == 0 and len(good.metrics) == 91
    assert result.faults["sink broken"] >= 1


def _peak_rss_while(fn) -> tuple[object, int]:
    me = psutil.Process()
    peak = [me.memory_info().rss]
    stop = threading.Event()

    def poll():
        while True:
            peak[0] = max(peak[0], me.memory_info().rss)
            if stop.wait(0.005):  # a sample every 5 ms until stopped
                return

    t = threading.Thread(target=poll)
    t.start()
    try:
        result = fn()
    finally:
        stop.set()
        t.join()
    return result, peak[0]


def test_a_200mb_line_without_newline_keeps_memory_bounded():
    code = ("import os\nb = b'x' * (1 << 20)\n"
            "for _ in range(200): os.write(1, b)\n"
            "os.write(1, b'\\nI0101 00:00:00.000001 1 solver.cpp:1] Iteration 5, loss = 0.25\\n')\n")
    seen = []
    sink = Collect()
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        baseline = psutil.Process().memory_info().rss
        result, peak = _peak_rss_while(lambda: supervise(
            [PY, "-c", code], hooks=[lambda r: seen.append((r.number, len(r.text), r.truncated))], sinks=[sink],
            stdout_fd=devnull, stderr_fd=devnull, forward_signals=False))
    finally:
        os.close(devnull)
    assert result.exit_code == 0
    assert seen == [(1, 1 << 20, True), (2, 62, False)]
    assert [(m.name, m.value, m.line) for m in sink.metrics] == [("total_loss", 0.25, 2)]
    assert peak - baseline < 60 * (1 << 20), f"grew by {(peak - baseline) >> 20} MiB"


def test_invalid_utf8_nul_bytes_and_progress_bars_pass_through_unchanged(tmp_path):
    payload = (b"\xff\xfe\xfdgarbage\x00\x00\n"
               b"Epoch 1: 10%|#   | 1/10 loss=9\rEpoch 1: 100%|####| 10/10 loss=1\n"
               b"I0101 00:00:00.000001 1 solver.cpp:1] Iteration 7, loss = 0.5\x00\n"
               b"\x1b[31mI0101 00:00:00.000002 1 solver.cpp:1] Iteration 8, loss = 0.4\x1b[0m\n"
               b"I0101 00:00:00.000003 1 solver.cpp:1] Iteration 9, loss = 0.3")
    src = tmp_path / "payload.bin"
    src.write_bytes(payload)
    code = f"import os; os.write(1, open({str(src)!r}, 'rb').read())"
    out = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT)
    seen, sink = [], Collect()
    try:
        result = supervise([PY, "-c", code], hooks=[lambda r: seen.append(r.text)], sinks=[sink],
                           stdout_fd=out, stderr_fd=None, forward_signals=False)
    finally:
        os.close(out)
    assert result.exit_code == 0
    assert (tmp_path / "out.bin").read_bytes() == payload
    assert seen[0] == "\ufffd\ufffd\ufffdgarbage\x00\x00"
    assert seen[1] == "Epoch 1: 100%|####| 10/10 loss=1"
    assert [(m.iteration, m.value) for m in sink.metrics] == [(7, 0.5), (8, 0.4), (9, 0.3)]


def test_command_errors_raise_typed_exceptions(tmp_path):
    with pytest.raises(CommandNotFound):
        Supervisor(["no-such-command-xyz"], forward_signals=False).run()
    script = tmp_path / "x.sh"
    script.write_text("true\n")
    with pytest.raises(CommandNotExecutable):
        Supervisor([str(script)], forward_signals=False).run()


def test_log_file_gets_both_streams_and_metrics_are_flushed_while_the_child_runs(tmp_path):
    line = "I0101 00:00:00.000001 1 solver.cpp:1] Iteration 3, loss = 0.75"
    code = ("import sys, time\n"
            f"print({line!r}, file=sys.stderr, flush=True)\n"
            "print('stdout line', flush=True)\n"
            "time.sleep(30)\n")
    metrics = tmp_path / "m.jsonl"
    proc = subprocess.Popen(
        TRAINVISOR + ["run", "--kill-timeout", "2", "--metrics", str(metrics), "--log-file", str(tmp_path / "out.log"),
                      "--run-dir", str(tmp_path / "run"), "--", PY, "-c", code],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        # Flushed on trainvisor's interval, which tells nobody: the file is looked at until then.
        def flushed() -> str:
            text = metrics.read_text() if metrics.exists() else ""
            return text if "total_loss" in text else ""

        content = wait_for(flushed, 10, "the metric on disk")
        assert '"total_loss", "value": 0.75' in content.replace('"name": ', "")  # on disk before the child ends
        assert proc.poll() is None
        log = (tmp_path / "out.log").read_bytes()
        assert line.encode() + b"\n" in log and b"stdout line\n" in log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert proc.returncode == 143  # the child died of the forwarded SIGTERM


def test_training_python_processes_log_into_the_run_log_through_the_environment(tmp_path):
    code = ("import logging, multiprocessing, trainvisor.logging as tl\n"
            "tl.attach()\n"
            "def work(i):\n"
            "    logging.getLogger('train').warning('worker %d step', i)\n"
            "if __name__ == '__main__':\n"
            "    logging.getLogger('train').warning('main starts')\n"
            "    ps = [multiprocessing.get_context('spawn').Process(target=work, args=(i,)) for i in range(2)]\n"
            "    [p.start() for p in ps]; [p.join() for p in ps]\n")
    script = tmp_path / "train.py"
    script.write_text(code)
    proc = run_cli(["--", PY, str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "run" / "train.log").read_text()
    assert "main starts" in text and "worker 0 step" in text and "worker 1 step" in text
    assert "trainvisor: run " in text and "ended: exit code 0, " in text  # trainvisor's own records, same file


def test_without_a_parser_argument_the_default_is_the_clis_auto():
    import inspect

    from trainvisor.parsers.select import DEFAULT_PARSER

    assert DEFAULT_PARSER == "auto"
    assert inspect.signature(supervise).parameters["parser"].default == DEFAULT_PARSER
    # ... and auto still finds the Caffe metrics the old "caffe" default found.
    sink = Collect()
    result = supervise([PY, str(FAKE_CAFFE), str(LOG), "--no-snapshots"], sinks=[sink], stdout_fd=None,
                       stderr_fd=None, forward_signals=False)
    assert (result.exit_code, len(sink.metrics)) == (0, 91)


def test_a_child_writing_utf16_is_parsed_as_its_replay_is_and_passed_through_as_written(tmp_path):
    """A Windows tool's UTF-16 redirect, printed again by a training (the fake trainings of the
    suite do that): the engine decides the stream's encoding from its first chunk, as a replay
    decides a file's from its head; the bytes on stdout stay UTF-16."""
    text = "".join(f"I0101 00:00:0{i}.000001 1 solver.cpp:1] Iteration {i}, loss = 0.{9 - i}\n" for i in range(4))
    payload = text.encode("utf-16")  # with its BOM
    src = tmp_path / "utf16.log"
    src.write_bytes(payload)
    out = os.open(tmp_path / "out.bin", os.O_WRONLY | os.O_CREAT)
    sink = Collect()
    try:
        result = supervise([PY, "-c", f"import os; os.write(1, open({str(src)!r}, 'rb').read())"], parser="caffe",
                           sinks=[sink], stdout_fd=out, stderr_fd=None, forward_signals=False)
    finally:
        os.close(out)
    assert result.exit_code == 0 and (tmp_path / "out.bin").read_bytes() == payload
    assert [(m.iteration, m.value) for m in sink.metrics] == [(0, 0.9), (1, 0.8), (2, 0.7), (3, 0.6)]
