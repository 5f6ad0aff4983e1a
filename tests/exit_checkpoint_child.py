"""A training stand-in that writes a checkpoint when it gets SIGTERM (as Lightning's and
Trainer's preemption handlers do), then dies of SIGTERM: exit status 143 through trainvisor.
With `ignore` as its argument it writes nothing and goes on (a training that does not stop)."""
import os
import signal
import sys
import time

IGNORE = sys.argv[1:] == ["ignore"]


def on_term(signum, frame):
    if IGNORE:
        print("SIGTERM ignored", flush=True)
        return
    os.makedirs("ckpt", exist_ok=True)
    with open("ckpt/model_final.pt.tmp", "wb") as fh:
        fh.write(os.urandom(1 << 20))
    os.rename("ckpt/model_final.pt.tmp", "ckpt/model_final.pt")  # complete by its rename
    print("saved checkpoint ckpt/model_final.pt", flush=True)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


signal.signal(signal.SIGTERM, on_term)
print(f"ready {os.getpid()}", flush=True)
step = 0
while True:
    step += 1
    print(f"step {step} loss={1.0 / step:.4f}", flush=True)
    time.sleep(0.1)
