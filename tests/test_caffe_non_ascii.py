"""A Caffe log block holding non-ASCII text (a progress bar, a path in another script) is read
by the Python loop instead of the C scanner: its metrics must be the same whole records."""
from __future__ import annotations

from trainvisor.events import Metric

from .parsing_helpers import FIXTURES, parse_file, parse_text


def test_non_ascii_block_gives_the_c_scanners_records(tmp_path):
    log = (FIXTURES / "lenet-newyear.log").read_text()
    ascii_only = parse_text(log, "caffe")
    with_bar = parse_text(log + "Epoch 0/2  ━━━━━━━━ 10/10 0:00:00 • 0:00:00\n", "caffe")
    metrics = [e for e in with_bar if type(e) is Metric]
    assert metrics and metrics == [e for e in ascii_only if type(e) is Metric]
    assert all(len(e) == len(Metric._fields) and e.stream == "t" for e in metrics)
    path = tmp_path / "caffe-and-bar.log"
    path.write_text(log + "训练 ━━ 10/10\n", encoding="utf-8")
    _, replayed = parse_file(path, "caffe")  # through the pipeline, which sets each record's stream
    assert ([e._replace(wall_time=0.0)[:9] for e in replayed if type(e) is Metric]
            == [e[:9] for e in ascii_only if type(e) is Metric])
