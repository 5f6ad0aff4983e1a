"""A training stand-in for the death-signal tests (tests/test_death_signal.py).

The first SIGTERM starts a checkpoint save in its handler: 4 MiB written to `save.part`, renamed
to `save` once whole. A SIGTERM after it means "abort now", as in many trainings: exit 2 at once,
a save under way cut short. Each run of the handler first appends a line to `terms`.

Python runs a handler once for signals that arrive close together, so the kernel's deliveries
are counted apart: Python's C handler writes the signal's number to the wakeup fd at every one.
SIGWINCH is the tests' probe: pending standard signals are handled lowest number first, so when
it is handled every SIGTERM sent before it has been; it writes how many SIGTERMs were delivered
to `delivered` and exits 0. The first line on stdout is `ready PID`, once the handlers are set.

    python term_save_child.py DIR
"""
import os
import signal
import sys

SAVE_CHUNKS = 64  # x 64 KiB: a save long enough that a second SIGTERM lands inside it


def main() -> None:
    folder = sys.argv[1]
    saving = []

    def on_term(signum, frame):
        with open(os.path.join(folder, "terms"), "a") as f:
            f.write("TERM\n")
        if saving:
            os._exit(2)
        saving.append(True)
        part = os.path.join(folder, "save.part")
        with open(part, "wb") as f:
            for _ in range(SAVE_CHUNKS):
                f.write(b"\0" * 65536)
        os.rename(part, os.path.join(folder, "save"))

    wake_r, wake_w = os.pipe2(os.O_NONBLOCK)

    def on_probe(signum, frame):
        with open(os.path.join(folder, "delivered"), "w") as f:
            f.write(f"{os.read(wake_r, 4096).count(signal.SIGTERM)}\n")
        os._exit(0)

    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGWINCH, on_probe)
    print(f"ready {os.getpid()}", flush=True)
    while True:
        signal.pause()


if __name__ == "__main__":
    sys.exit(main())
