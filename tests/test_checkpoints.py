"""The one serialisation of a Checkpoint and of the Manifest: what the journal, checkpoints.jsonl
and the uploaded manifest hold, read back unchanged."""
from __future__ import annotations

import json

from trainvisor.checkpoints import Manifest, ManifestEntry, checkpoint_from_dict, checkpoint_to_dict
from trainvisor.events import Checkpoint, CheckpointFile

CP = Checkpoint(name="lenet_iter_500", files=(CheckpointFile("/r/snap/lenet_iter_500.caffemodel", "lenet_iter_500.caffemodel"),
                                              CheckpointFile("/r/snap/lenet_iter_500.solverstate", "lenet_iter_500.solverstate")),
                iteration=500, epoch=1.5, root="/r/snap", framework="caffe")


def test_checkpoint_round_trips_through_json():
    d = json.loads(json.dumps(checkpoint_to_dict(CP)))
    assert d["files"][0] == {"path": "/r/snap/lenet_iter_500.caffemodel", "relpath": "lenet_iter_500.caffemodel"}
    assert checkpoint_from_dict(d) == CP


def test_checkpoint_from_a_journal_written_before_the_shared_format():
    old = {"name": "m", "iteration": None, "epoch": None, "root": "/r", "framework": "pytorch",
           "files": [["/r/m.pt", "m.pt"]]}
    assert checkpoint_from_dict(old) == Checkpoint("m", (CheckpointFile("/r/m.pt", "m.pt"),), None, None, "/r", "pytorch")


def test_a_nan_epoch_stays_valid_json_and_reads_back_as_nan():
    cp = Checkpoint("m", (), None, float("nan"), "/r", "")
    text = json.dumps(checkpoint_to_dict(cp), allow_nan=False)
    assert checkpoint_from_dict(json.loads(text)).epoch != checkpoint_from_dict(json.loads(text)).epoch


def test_manifest_keeps_its_stored_field_names_and_round_trips():
    m = Manifest.of("r1", CP, (ManifestEntry("lenet_iter_500.caffemodel", "p/r1/lenet_iter_500.caffemodel", 10,
                                             "sha256:ab"),))
    d = json.loads(m.to_json())
    assert d == {"run_id": "r1", "name": "lenet_iter_500", "iteration": 500, "epoch": 1.5, "framework": "caffe",
                 "files": [{"relpath": "lenet_iter_500.caffemodel", "key": "p/r1/lenet_iter_500.caffemodel",
                            "size": 10, "checksum": "sha256:ab"}]}
    assert Manifest.from_json(m.to_json()) == m


def test_a_manifest_says_which_checksum_verified_each_file_old_ones_too():
    """S3 manifests written before checksums were read held `etag:`; now `crc32c:`: both read."""
    old = Manifest.of("r1", CP, (ManifestEntry("a", "p/r1/a", 10, "etag:0cc175b9c0f1b6a831c399e269772661"),))
    new = Manifest.of("r1", CP, (ManifestEntry("a", "p/r1/a", 10, "crc32c:wdBDMA==-3"),))
    assert [Manifest.from_json(m.to_json()).files[0].checksum_kind for m in (old, new)] == ["etag", "crc32c"]


def test_an_epoch_has_one_type_whoever_writes_the_manifest():
    """Live, a recogniser reads `epoch=3` from a name (an int); `resume` reads the journal back (3.0):
    the manifest and checkpoints.jsonl say 3.0 either way."""
    live = Checkpoint(name="epoch=3", files=(CheckpointFile("/r/epoch=3.ckpt", "epoch=3.ckpt"),), iteration=None,
                      epoch=3, root="/r", framework="lightning")
    resumed = checkpoint_from_dict(json.loads(json.dumps(checkpoint_to_dict(live))))
    assert type(live.epoch) is float and live == resumed
    assert Manifest.of("run", live, ()).to_json() == Manifest.of("run", resumed, ()).to_json()
    assert '"epoch": 3.0' in Manifest.of("run", live, ()).to_json()
