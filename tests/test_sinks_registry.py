"""The sink registry: a malformed sink is rejected where it is registered, naming it; what a
factory makes is checked before the child starts; the built-ins are there by name, made from
`sinks.use` and `sinks.options` in a config file, and write what their classes write."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor import Run, RunConfig
from trainvisor.config import RunDirConfig, SinksConfig
from trainvisor.config.dump import dump
from trainvisor.errors import ConfigError
from trainvisor.sinks import registry
from trainvisor.sinks.registry import available_sinks, get_sink_info, make_sink, register_sink

from .conftest import FAKE_CAFFE, ROOT


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """What a test registers is gone after it."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


class GoodSink:
    name = "good"

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix

    def write(self, events) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


class NoClose:
    name = "no-close"

    def write(self, events) -> None:
        pass

    def flush(self) -> None:
        pass


def test_the_builtin_sinks_are_registered_inline_by_name():
    assert {"jsonl", "caffe-csv", "stats"} <= set(available_sinks())
    assert all(get_sink_info(n).inline for n in ("jsonl", "caffe-csv", "stats"))


def test_register_sink_is_a_decorator_and_a_registered_sink_is_threaded_by_default():
    decorated = register_sink("good")(GoodSink)
    assert decorated is GoodSink
    info = get_sink_info("good")
    assert (info.name, info.factory, info.inline) == ("good", GoodSink, False)
    register_sink("good", GoodSink)  # the same factory again is not a conflict
    info, sink = make_sink("good", {"prefix": "run-1"})
    assert isinstance(sink, GoodSink) and sink.prefix == "run-1"


@pytest.mark.parametrize("name, factory, message", [
    ("bad name!", GoodSink, "sink 'bad name!': a sink name is letters, digits, '-', '_' or '.'"),
    ("not-callable", 42, "sink 'not-callable': its factory must be callable (a class or a function), got 42"),
    ("no-close", NoClose, "sink 'no-close': class NoClose has no method close()"),
])
def test_a_malformed_sink_is_rejected_when_registered_naming_it(name, factory, message):
    with pytest.raises(ConfigError) as err:
        register_sink(name, factory)
    assert str(err.value) == message
    assert name not in registry._REGISTRY


def test_a_name_taken_by_another_factory_is_refused():
    register_sink("good", GoodSink)
    with pytest.raises(ConfigError, match=r"^sink 'good' is registered twice"):
        register_sink("good", lambda: GoodSink())


@pytest.mark.parametrize("factory, options, message", [
    (lambda: NoClose(), {}, "sink 'made': NoClose object has no method close()"),
    (lambda: type("Anonymous", (GoodSink,), {"name": ""})(), {}, "sink 'made': Anonymous object has no `name`"),
    (GoodSink, {"prefx": "x"}, "sink 'made': cannot be made with options {'prefx': 'x'}: TypeError: "),
])
def test_what_a_factory_makes_is_checked_in_one_line_naming_the_sink(factory, options, message):
    register_sink("made", factory)
    with pytest.raises(ConfigError) as err:
        make_sink("made", options)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_misspelled_name_says_which_was_meant():
    with pytest.raises(ConfigError) as err:
        get_sink_info("caffe_csv")
    assert str(err.value) == "unknown sink 'caffe_csv' (did you mean 'caffe-csv'?)"


def test_installed_packages_are_looked_up_only_for_a_name_not_built_in():
    code = ("import sys; from trainvisor.sinks import registry; registry.get_sink_info('jsonl'); "
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.stdout == "False\n", out.stderr


def test_a_python_sink_without_write_fails_before_the_child_starts(tmp_path):
    marker = tmp_path / "started"
    config = RunConfig(command=(sys.executable, "-c", f"open({str(marker)!r}, 'w')"),
                       run=RunDirConfig(dir=str(tmp_path / "run")))
    with pytest.raises(ConfigError) as err:
        Run(config, sinks=[NoClose()]).run()
    assert str(err.value) == "sink 'no-close': NoClose object has no method close()"
    assert not marker.exists()


def test_options_for_a_sink_not_used_are_an_error(tmp_path):
    config = RunConfig(command=("true",), sinks=SinksConfig(options={"jsnol": {"path": "x"}}),
                       run=RunDirConfig(dir=str(tmp_path / "run")))
    with pytest.raises(ConfigError) as err:
        Run(config).run()
    assert str(err.value) == "sinks.options.jsnol: no sink 'jsnol' in sinks.use (--sink jsnol)"


@pytest.mark.parametrize("fmt", ["yaml", "toml"])
def test_sink_options_are_printed_and_read_back_with_secrets_masked(tmp_path, fmt):
    options = {"webhook": {"url": "https://example.invalid/hook", "api_token": "s3cret", "retries": [1, 2]}}
    config = RunConfig(sinks=SinksConfig(use=("webhook",), options=options, queue=50))
    text = dump(config, fmt)
    assert "s3cret" not in text
    path = tmp_path / f"c.{fmt}"
    path.write_text(text.replace('"***"', '"s3cret"'))
    assert RunConfig.from_file(str(path)) == config


def test_builtin_file_sinks_from_a_config_file_write_what_the_run_parsed(tmp_path):
    """`jsonl` and `caffe-csv` named in YAML: a second JSONL file with the run's records, and the
    parse_log.py tables of the same log (what `trainvisor parse --format csv` writes)."""
    (tmp_path / "run.yaml").write_text(
        "sinks:\n  use: [jsonl, caffe-csv]\n  options:\n"
        f"    jsonl: {{path: {tmp_path / 'copy.jsonl'}, mode: w}}\n"
        f"    caffe-csv: {{outdir: {tmp_path / 'live'}, basename: caffe}}\n")
    log = tmp_path / "caffe.log"
    subprocess.run([sys.executable, str(FAKE_CAFFE), "train", "--generate", "600", "--no-snapshots"],
                   stderr=log.open("wb"), check=True, timeout=120, cwd=tmp_path)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    run = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--config", "run.yaml", "--parser", "caffe",
                          "--year", "2026", "--run-dir", "run", "--", "cat", str(log)],
                         capture_output=True, timeout=120, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    parse = subprocess.run([sys.executable, "-m", "trainvisor", "parse", "--parser", "caffe", "--year", "2026",
                            "--csv", "replayed", str(log)], capture_output=True, env=env, timeout=120, cwd=tmp_path)
    assert parse.returncode == 0, parse.stderr
    copy = (tmp_path / "copy.jsonl").read_text().splitlines()
    own = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert len(own) == 111
    assert copy == [line.replace(', "attempt": 1}', "}") for line in own]  # the run's own adds its attempt
    for table in ("train", "test"):
        live = (tmp_path / "live" / f"caffe.{table}").read_text()
        assert live == (tmp_path / "replayed" / f"caffe.log.{table}").read_text()
    assert live.splitlines()[0] == "NumIters,Seconds,LearningRate,accuracy,loss"


def test_the_sink_flag_names_sinks_and_a_misspelled_one_stops_the_run_before_the_child(tmp_path):
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}
    shown = subprocess.run([sys.executable, "-m", "trainvisor", "config", "show", "--sink", "jsonl", "--sink", "stats"],
                           capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert '  use: ["jsonl", "stats"]' in shown.stdout.splitlines()
    marker = tmp_path / "started"
    run = subprocess.run([sys.executable, "-m", "trainvisor", "run", "--run-dir", "run", "--sink", "stast", "--",
                          sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
                         capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path)
    assert (run.returncode, run.stderr) == (2, "trainvisor: unknown sink 'stast' (did you mean 'stats'?)\n")
    assert not marker.exists()
