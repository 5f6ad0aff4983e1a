"""`make demo`: a supervised fake-Caffe training run, metrics to JSONL, a summary at the end.

Needs no cloud account and no network: the child is `fixtures/bin/fake-caffe`
replaying the project's own Caffe-format log.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    fake = ROOT / "fixtures" / "bin" / "fake-caffe"
    log = ROOT / "fixtures" / "logs" / "lenet-newyear.log"
    if not fake.exists():
        print("trainvisor demo: run it from a source checkout (fixtures/ not found)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="trainvisor-demo-"))
    run_dir = ROOT / "trainvisor-runs" / "demo"
    argv = [sys.executable, "-m", "trainvisor", "run", "--summary", "--run-dir", str(run_dir), "--year", "2026",
            "--", sys.executable, str(fake), str(log), "--rate", "150", "--snapshot-size", "65536"]
    print(f"$ trainvisor run --summary --run-dir {run_dir} -- fake-caffe {log.name} --rate 150", flush=True)
    rc = subprocess.call(argv, cwd=work)
    snaps = sorted(p.name for p in (work / "examples" / "mnist").glob("*")) if (work / "examples").exists() else []
    print(f"\nsnapshots written by the fake training in {work}: {', '.join(snaps) or 'none'}")
    print(f"metrics: {run_dir / 'metrics.jsonl'} (try: trainvisor replay {log} --year 2026 | head)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
