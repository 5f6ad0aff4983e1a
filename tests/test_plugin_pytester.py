"""The plugin in a fresh test session, as a user gets it after `pip install trainvisor`: the
README's example test file, in a temporary directory, finds the fixtures through the `pytest11`
entry point alone (no conftest), and `-p no:trainvisor` takes them away.

"Installed" here is what pip writes for the package's metadata: a `.dist-info` whose
`entry_points.txt` is setup.cfg's `[options.entry_points]`, on the session's path beside the
checkout (a real `pip install -e` would also build the C extensions and write into the checkout:
seconds of compiling and stray files, for the same metadata)."""
from __future__ import annotations

import configparser
import re

import pytest

import trainvisor

from .conftest import FIXTURES, ROOT

pytest_plugins = ["pytester"]

EXAMPLE = re.compile(r"<!-- example-test:begin -->\n```python\n(.*?)```\n<!-- example-test:end -->", re.S)


def entry_points_txt() -> str:
    """setup.cfg's entry points in the format pip writes them to `entry_points.txt`."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    groups = cfg["options.entry_points"]
    return "".join(f"[{group}]\n" + "".join(f"{line.strip()}\n" for line in value.strip().splitlines()) + "\n"
                   for group, value in groups.items())


@pytest.fixture
def installed(pytester: pytest.Pytester, tmp_path_factory, monkeypatch) -> pytest.Pytester:
    """A pytester directory holding the README's example test beside a Caffe log, with trainvisor
    "installed": its dist-info on the path the session's subprocess runs with."""
    site = tmp_path_factory.mktemp("site")
    info = site / f"trainvisor-{trainvisor.__version__}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: trainvisor\nVersion: {trainvisor.__version__}\n")
    (info / "entry_points.txt").write_text(entry_points_txt())
    monkeypatch.setenv("PYTHONPATH", f"{site}:{ROOT}")
    example = EXAMPLE.search((ROOT / "README.md").read_text())
    assert example, "README.md holds the example test file between its markers"
    pytester.makepyfile(test_training_log=example.group(1))
    (pytester.path / "train.log").write_bytes((FIXTURES / "logs" / "lenet-newyear.log").read_bytes())
    return pytester


def test_entry_point_is_pytests_trainvisor_plugin():
    assert "[pytest11]\ntrainvisor = trainvisor.testing.plugin\n" in entry_points_txt()


def test_readme_example_runs_in_a_fresh_session_with_the_installed_plugin(installed):
    first = installed.runpytest_subprocess("--trainvisor-update-golden")
    first.assert_outcomes(passed=3)
    assert f"trainvisor-{trainvisor.__version__}" in first.stdout.str()  # pytest's header names the plugin's package
    assert (installed.path / "train.golden.jsonl").read_text().count("\n") == 99
    installed.runpytest_subprocess().assert_outcomes(passed=3)


def test_a_changed_log_fails_the_golden_test_with_pytests_own_comparison(installed):
    installed.runpytest_subprocess("--trainvisor-update-golden").assert_outcomes(passed=3)
    log = installed.path / "train.log"
    log.write_bytes(log.read_bytes().replace(b"loss = 1.74503\n", b"loss = 1.5\n"))
    done = installed.runpytest_subprocess("-k", "unchanged")
    done.assert_outcomes(failed=1, deselected=2)
    done.stdout.fnmatch_lines([
        "*first difference at record 8: total_loss/train at iteration 50 (line 26): golden 1.74503, now 1.5",
        "*Differing items:",
        "*{'value': 1.5} != {'value': 1.74503}",
    ])


def test_p_no_trainvisor_turns_the_fixtures_off(installed):
    done = installed.runpytest_subprocess("-p", "no:trainvisor")
    done.assert_outcomes(errors=3)
    done.stdout.fnmatch_lines(["*fixture 'replay_log' not found*"])
