"""A training stand-in that says which signals reach it: one line per signal received (its
number), after a first line `ready PID` once every handler is set. Used by the signal tests
through `trainvisor run`. SIGCHLD is left alone (Python's own children); SIGKILL and SIGSTOP
cannot be caught."""
import os
import signal
import sys


def main() -> None:
    def report(signum, frame):
        os.write(1, f"{signum}\n".encode())

    for sig in range(1, 32):
        if sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            signal.signal(sig, report)
    print(f"ready {os.getpid()}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
