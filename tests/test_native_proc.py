"""The kernel calls the supervisor makes without ctypes (_native/_proc.c), read back from the
kernel itself: PR_GET_CHILD_SUBREAPER, and a process's ignored signals in /proc/PID/status.
Each case runs in a fresh Python process, so the test process's own state is never changed."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from trainvisor.supervisor.kernel import native_proc

PY = sys.executable
built = pytest.mark.skipif(native_proc() is None, reason="the C extension trainvisor._native._proc is not built")


def _python(code: str) -> str:
    done = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@built
def test_subreaper_is_set_and_undone_as_the_kernel_reports_it():
    out = _python("from trainvisor.supervisor.kernel import native_proc\n"
                  "from trainvisor.supervisor.process import become_subreaper, stop_subreaper\n"
                  "p = native_proc()\n"
                  "print(p.child_subreaper(), become_subreaper(), p.child_subreaper(), become_subreaper())\n"
                  "stop_subreaper(); print(p.child_subreaper())\n")
    # not one; made one (True); one; already one (False: the caller must not undo it); undone
    assert out == "False True True False\nFalse\n"


@built
def test_an_orphan_is_adopted_by_the_subreaper_and_by_init_once_undone():
    """What the flag is for: a double-forked grandchild re-parents to trainvisor."""
    code = ("import os, time\n"
            "from trainvisor.supervisor.kernel import native_proc\n"
            "p = native_proc()\n"
            "def orphan_parent():\n"
            "    r, w = os.pipe()\n"
            "    if os.fork() == 0:\n"
            "        if os.fork() == 0:\n"
            "            os.close(r); time.sleep(0.3); os.write(w, str(os.getppid()).encode()); os._exit(0)\n"
            "        os._exit(0)\n"
            "    os.close(w); os.wait(); got = os.read(r, 32); os.close(r)\n"
            "    return int(got)\n"
            "p.set_child_subreaper(True); adopted = orphan_parent()\n"
            "p.set_child_subreaper(False); after = orphan_parent()\n"
            "print(adopted == os.getpid(), after == os.getpid())\n")
    assert _python(code) == "True False\n"


def _ignored(status: str) -> int:
    return int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)


@built
def test_default_signal_undoes_an_ignored_signal_from_a_thread_that_is_not_main():
    code = ("import signal, threading\n"
            "from trainvisor.supervisor.kernel import native_proc\n"
            "signal.signal(signal.SIGQUIT, signal.SIG_IGN)\n"
            "before = open('/proc/self/status').read()\n"
            "t = threading.Thread(target=native_proc().default_signal, args=(int(signal.SIGQUIT),))\n"
            "t.start(); t.join()\n"
            "print(before + '---' + open('/proc/self/status').read())\n")
    before, after = _python(code).split("---")
    bit = 1 << (signal.SIGQUIT - 1)
    assert _ignored(before) & bit and not _ignored(after) & bit


@built
def test_a_refused_call_is_an_oserror_with_its_errno():
    out = _python("from trainvisor.supervisor.kernel import native_proc\n"
                  "for call, arg in (('set_parent_death_signal', 99), ('default_signal', 9)):\n"
                  "    try:\n"
                  "        getattr(native_proc(), call)(arg)\n"
                  "    except OSError as exc:\n"
                  "        print(call, exc.errno)\n")
    assert out == "set_parent_death_signal 22\ndefault_signal 22\n"  # EINVAL: no signal 99; SIGKILL's action is fixed


def test_without_the_extension_ctypes_makes_the_same_calls():
    """`sys.modules[...] = None` makes the import fail as an unbuilt extension's does."""
    code = ("import os, signal, sys\n"
            "sys.modules['trainvisor._native._proc'] = None\n"
            "from trainvisor.supervisor.kernel import native_proc\n"
            "from trainvisor.supervisor.process import become_subreaper, stop_subreaper\n"
            "from trainvisor.supervisor.signals import child_setup\n"
            "made = become_subreaper(); again = become_subreaper(); stop_subreaper()\n"
            "setup = child_setup(signal.SIGUSR1)\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    setup(); os.kill(os.getppid(), 0); os._exit(0)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(native_proc(), made, again, os.WEXITSTATUS(status), 'ctypes' in sys.modules)\n")
    assert _python(code) == "None True False 0 True\n"
