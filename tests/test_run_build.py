"""What the run builds from its configuration before the training starts."""
from __future__ import annotations

import pytest

from trainvisor.config import WatchConfig
from trainvisor.errors import ConfigError
from trainvisor.run.build import build_watcher, watch_dirs


class Recorder:
    def __init__(self) -> None:
        self.got: list = []

    def submit(self, checkpoint) -> None:
        self.got.append(checkpoint)


def test_the_solver_directory_is_watched_without_being_told(tmp_path):
    (tmp_path / "solver.prototxt").write_text('snapshot_prefix: "snaps/net"\n')
    argv = ["caffe", "train", "-solver", "solver.prototxt"]
    dirs = watch_dirs(WatchConfig(dirs=("extra",)), argv=argv, cwd=str(tmp_path))
    assert dirs == ["extra", str(tmp_path / "snaps")]
    w = build_watcher(WatchConfig(), dirs, cwd=str(tmp_path), consumer=Recorder())
    assert sorted(w.roots) == [str(tmp_path / "extra"), str(tmp_path / "snaps")]
    assert watch_dirs(WatchConfig(), argv=["python", "t.py"], cwd=str(tmp_path)) == []


def test_watching_a_file_is_a_config_error(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"x")
    with pytest.raises(ConfigError, match="watch.dirs \\(--watch\\): model.pt is not a directory"):
        build_watcher(WatchConfig(), ["model.pt"], cwd=str(tmp_path), consumer=Recorder())
