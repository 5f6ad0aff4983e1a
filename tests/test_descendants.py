"""Every descendant is ended (issue 23): workers that exec with an empty environment and leave the
child's session are still the run's, found by what the kernel says; a rerun on a run directory
first ends what a killed trainvisor left running, checked by pid and start time, never a stranger.

Real processes throughout (fixtures/bin/tree-child's `hiding-workers`: `sleep 600` execs with an
empty environment); each test SIGKILLs whatever it started and asserts with psutil that nothing is
left.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from trainvisor.supervisor.procfs import stamp_of

from .conftest import FIXTURES
from .test_process_tree import wait_for

TREE_CHILD = [sys.executable, str(FIXTURES / "bin" / "tree-child")]
TRAINVISOR = [sys.executable, "-m", "trainvisor"]


def running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's zombie waits for init, but runs nothing)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pids_in(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()]


class Started:
    """Every pid a test learns of, SIGKILLed at its end, and asserted gone."""

    def __init__(self) -> None:
        self.pids: set[int] = set()
        self.popens: list[subprocess.Popen] = []

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kw)
        self.popens.append(proc)
        self.pids.add(proc.pid)
        return proc

    def cleanup(self) -> None:
        for pid in self.pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        for proc in self.popens:
            proc.wait(timeout=10)
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        # A SIGKILLed orphan is gone once the kernel has torn it down: moments, not at once.
        wait_for(lambda: not [pid for pid in self.pids if running(pid)], 10, "every process the test started to end")


@pytest.fixture
def started():
    s = Started()
    try:
        yield s
    finally:
        s.cleanup()


def run_env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("COLUMNS", "LINES", "TERM", "NO_COLOR", "FORCE_COLOR"):
        env.pop(name, None)
    return dict(env, LANG="C.UTF-8", LC_ALL="C.UTF-8", TZ="UTC", PYTHONIOENCODING="utf-8")


def test_workers_that_exec_with_an_empty_environment_and_setsid_are_ended_when_trainvisor_exits(started, tmp_path):
    go = tmp_path / "go"
    proc = started.popen([*TRAINVISOR, "run", "--run-dir", str(tmp_path / "run"), "--parser", "generic", "--",
                          *TREE_CHILD, "hiding-workers", str(tmp_path), "--group", "2", "--setsid", "3",
                          "--exit", "3", "--wait-for", str(go)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env())
    assert proc.stdout.readline() == b"workers 5\n"
    workers = pids_in(tmp_path / "workers")
    started.pids.update(workers)
    child = psutil.Process(workers[0]).ppid()
    # What makes them hard to find: no token in their environment, three outside the child's session.
    assert [open(f"/proc/{p}/environ", "rb").read() for p in workers] == [b""] * 5
    assert [os.getsid(p) == child for p in workers] == [True, True, False, False, False]
    go.touch()  # the child exits 3; its five workers run on, re-parented to trainvisor
    rc = proc.wait(timeout=60)
    err = proc.stderr.read().decode()
    assert rc == 3, err
    assert [p for p in workers if running(p)] == []
    assert "holds its stdout open" not in err and "holds its stderr open" not in err
    # The record's one attempt names every worker by pid and start time, and says it ended.
    lines = [json.loads(line) for line in (tmp_path / "run" / "processes.jsonl").read_text().splitlines()]
    seen = {s[0] for line in lines for s in line.get("seen", ())}
    assert set(workers) <= seen and lines[0]["child"][0] == child and "ended" in lines[-1]


def test_a_rerun_ends_the_workers_a_killed_trainvisor_left_and_never_a_stranger(started, tmp_path):
    run_dir = tmp_path / "run"
    record = run_dir / "processes.jsonl"
    # `keep`: the death signal goes to the child's whole group (as trainvisor's own forwarding does)
    # and would end the two group workers; the test sends the child its SIGTERM itself.
    first = started.popen([*TRAINVISOR, "run", "--run-dir", str(run_dir), "--parser", "generic",
                           "--on-supervisor-death", "keep", "--",
                           *TREE_CHILD, "hiding-workers", str(tmp_path), "--group", "2", "--setsid", "2", "--late"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env())
    workers = [int(p) for p in wait_for(lambda: (tmp_path / "workers").exists() and pids_in(tmp_path / "workers"),
                                        30, "the workers")]
    started.pids.update(workers)

    def recorded() -> set[int]:
        text = record.read_text() if record.exists() else ""
        return {s[0] for line in text.splitlines() if line.endswith("}") for s in json.loads(line).get("seen", ())}

    wait_for(lambda: set(workers) <= recorded(), 30, "the workers in the record")
    first.kill()  # SIGKILL: trainvisor ends nothing
    assert first.wait(timeout=10) == -signal.SIGKILL
    child = json.loads(record.read_text().splitlines()[0])["child"][0]
    os.kill(child, signal.SIGTERM)  # the child alone: it starts one more worker and exits
    late = int(wait_for(lambda: (tmp_path / "late").exists() and (tmp_path / "late").read_text(), 30, "the late worker"))
    started.pids.add(late)
    wait_for(lambda: not running(child), 30, "the old child to exit after starting its late worker")
    assert late not in recorded()  # no look at the tree saw it: found by its group alone
    assert all(running(p) for p in [*workers, late])
    # A stranger whose pid the record names with another start time: it must be left alone.
    stranger = started.popen(["sleep", "600"], start_new_session=True)
    true_start = stamp_of(stranger.pid).start
    with open(record, "a") as f:
        f.write(json.dumps({"attempt": 1, "seen": [[stranger.pid, true_start - 7, stranger.pid, stranger.pid]]}) + "\n")
    old = [*workers, late]
    # The new child reports which old workers still run when it starts: none.
    probe = ("import sys\nfrom trainvisor.supervisor.procfs import stamp_of\n"
             f"print('old workers running:', [p for p in {old!r} if stamp_of(p)])")
    second = started.popen([*TRAINVISOR, "run", "--run-dir", str(run_dir), "--parser", "generic", "--",
                            sys.executable, "-c", probe],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=run_env())
    out, err = (b.decode() for b in second.communicate(timeout=60))
    assert second.returncode == 0, err
    assert out == "old workers running: []\n"
    assert f"run directory {run_dir}: 5 process(es) of an earlier attempt still running" in err
    for pid in workers:
        assert f"ended pid {pid} (sleep) of attempt 1, recorded: ended by SIGTERM" in err
    assert f"ended pid {late} (sleep) of attempt 1, in its group or session: ended by SIGTERM" in err
    assert f"pid {stranger.pid} " not in err and running(stranger.pid)
    assert [p for p in old if running(p)] == []
    run_log = (run_dir / "train.log").read_text()
    assert f"ended pid {late} (sleep) of attempt 1, in its group or session: ended by SIGTERM" in run_log
    # The record starts afresh with the second run's attempt (the stranger's line kept nothing alive).
    attempts = {json.loads(line)["attempt"] for line in record.read_text().splitlines()}
    assert attempts == {2}


def test_an_in_process_supervisor_never_ends_its_callers_own_processes(started, tmp_path):
    """A pytest process running a Supervisor as subreaper: its servers are its children too. One
    started before the child (the host's), one started while it runs in a session of its own and
    named by `own_pids`, one in the caller's own session: all three live on; the workers do not."""
    from trainvisor import Supervisor

    before = started.popen(["sleep", "600"], start_new_session=True)
    go = tmp_path / "go"
    servers: list[subprocess.Popen] = [before]

    def start_servers_then_let_the_child_exit() -> None:
        wait_for(lambda: (tmp_path / "workers").exists(), 30, "the workers")
        servers.append(started.popen(["sleep", "600"], start_new_session=True))  # named in own_pids
        servers.append(started.popen(["sleep", "600"]))  # the caller's own session
        started.pids.update(pids_in(tmp_path / "workers"))
        go.touch()

    helper = threading.Thread(target=start_servers_then_let_the_child_exit)
    helper.start()
    sup = Supervisor([*TREE_CHILD, "hiding-workers", str(tmp_path), "--group", "1", "--setsid", "2", "--exit", "0",
                      "--wait-for", str(go)],
                     subreaper=True, stdout_fd=None, stderr_fd=None, own_pids=lambda: [s.pid for s in servers[1:2]])
    try:
        result = sup.run()
    finally:
        helper.join()
    workers = pids_in(tmp_path / "workers")
    assert result.exit_code == 0 and len(servers) == 3
    assert [p for p in workers if running(p)] == []
    assert [running(s.pid) for s in servers] == [True, True, True]
    assert all(s.poll() is None for s in servers)  # nobody reaped them but their owner (us)


def test_a_group_whose_leader_is_gone_counts_only_members_started_while_the_attempt_ran(started):
    """The late-worker rule, on real processes: a recorded child (a group leader) has exited and
    one member of its group runs on. It is the attempt's only if it started between the child and
    the attempt's last sign of life (plus the slack); any other start time is a stranger's."""
    from trainvisor.supervisor.leftovers import SLACK, find_leftovers
    from trainvisor.supervisor.procfs import Stamp, pid_space
    from trainvisor.supervisor.record import RecordedAttempt

    # A member can join a group only in its own session: the leader starts it, then is killed.
    leader = started.popen(["sh", "-c", "sleep 600 & echo $!; exec sleep 600"], start_new_session=True,
                           stdout=subprocess.PIPE)
    member = int(leader.stdout.readline())
    started.pids.add(member)
    lead = stamp_of(leader.pid)
    leader.kill()
    leader.wait(timeout=10)
    mine = stamp_of(member)
    assert mine is not None and mine.pgid == leader.pid and stamp_of(leader.pid) is None

    def attempt(child_start: int, last: int, space: str = pid_space()) -> RecordedAttempt:
        return RecordedAttempt(1, space, None, Stamp(lead.pid, child_start, lead.pid, lead.pid), (), last)

    def found(att: RecordedAttempt) -> list[tuple[int, str]]:
        return [(left.stamp.pid, left.found) for left in find_leftovers([att])]

    assert found(attempt(lead.start, mine.start)) == [(member, "in its group or session")]
    assert found(attempt(lead.start, mine.start - SLACK)) == [(member, "in its group or session")]
    assert found(attempt(lead.start, mine.start - SLACK - 1)) == []  # started after the attempt ended
    assert found(attempt(mine.start + 1, mine.start + 100)) == []  # started before the attempt's child
    assert found(attempt(lead.start, mine.start, space="another-boot/pid:[1]")) == []


def test_the_record_reads_back_whole_lines_only(tmp_path):
    """A record cut by a SIGKILL or a full disk: what cannot be read is skipped, the rest stands."""
    from trainvisor.supervisor.record import read_record

    path = tmp_path / "processes.jsonl"
    path.write_text('{"attempt":1,"space":"s","supervisor":[10,5,9,8],"child":[11,6,11,11]}\n'
                    'not json\n'
                    '{"attempt":1,"seen":[[11,6,11,11],[12,7,11,11]]}\n'
                    '{"attempt":1,"ended":40}\n'
                    '{"attempt":2,"space":"s","supervisor":[10,5,9,8],"child":[13,50,13,13]}\n'
                    '{"attempt":2,"seen":[[14,5')
    first, second = read_record(path)
    assert (first.attempt, first.child.pid, [s.pid for s in first.seen], first.last) == (1, 11, [11, 12], 40)
    assert (second.attempt, second.child.start, second.seen) == (2, 50, ())
    assert second.last > 50  # not ended: the record's last touch, now
    assert read_record(tmp_path / "none.jsonl") == []
