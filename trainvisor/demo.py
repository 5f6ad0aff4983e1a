"""`make demo`: a supervised fake-Caffe training run, metrics to JSONL, a summary at the end,
every checkpoint uploaded (verified, manifest last) to the embedded file:// store.

Needs no cloud account and no network: the child is `fixtures/bin/fake-caffe`
replaying the project's own Caffe-format log.
"""
from __future__ import annotations

import shutil
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
    run_dir = Path(tempfile.gettempdir()) / "trainvisor-demo"  # nothing is written into the checkout
    if run_dir.exists():
        shutil.rmtree(run_dir)
    work = run_dir / "workdir"  # the fake training's working directory
    work.mkdir(parents=True)
    snapshots = work / "examples" / "mnist"
    store = run_dir / "backups"
    argv = [sys.executable, "-m", "trainvisor", "run", "--summary", "--run-dir", str(run_dir), "--run-id", "demo",
            "--year", "2026", "--watch", str(snapshots), "--upload-to", f"file://{store}",
            "--", sys.executable, str(fake), str(log), "--rate", "150", "--snapshot-size", "65536"]
    print(f"$ trainvisor run --summary --watch {snapshots} --upload-to file://{store} "
          f"-- fake-caffe {log.name} --rate 150", flush=True)
    rc = subprocess.call(argv, cwd=work)
    snaps = sorted(p.name for p in snapshots.glob("*")) if snapshots.exists() else []
    print(f"\nsnapshots written by the fake training in {snapshots}: {', '.join(snaps) or 'none'}")
    record = run_dir / "checkpoints.jsonl"
    done = record.read_text().count("\n") if record.exists() else 0
    print(f"complete checkpoints seen by the watcher: {done} (in {record})")
    manifests = sorted(p.name for p in store.rglob("*.manifest.json")) if store.exists() else []
    print(f"checkpoint sets uploaded and verified to {store}: {len(manifests)} ({', '.join(manifests) or 'none'})")
    print(f"metrics: {run_dir / 'metrics.jsonl'} (try: trainvisor replay {log} --year 2026 | head)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
