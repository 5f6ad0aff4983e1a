"""Configuration files, the environment and flags: one effective configuration, however written;
every bad value is one line naming the key and where it was written, before any child starts;
no secret is ever printed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainvisor import RunConfig
from trainvisor.config import ProcessConfig, UploadConfig, WatchConfig
from trainvisor.errors import ConfigError

TRAINVISOR = [sys.executable, "-m", "trainvisor"]
SECRET = "tok-9f3e-do-not-print"

YAML = f"""\
command: [python3, train.py, --epochs, "3"]
process:
  cwd: /tmp
  kill_timeout: 12.5
  env: {{OMP_NUM_THREADS: 4, WANDB_API_KEY: {SECRET}}}
parsing:
  parser: keras
  iters_per_epoch: 100
sinks:
  jsonl: /tmp/m.jsonl
watch:
  dirs: [ckpt, more]
  poll: true
  settle: 0.5
  checkpoint_patterns: ["*.pt"]
  policy: every-2
upload:
  to: s3://backups/team
  drain_timeout: 30
  concurrency: 4
logging:
  quiet: true
run:
  id: exp-1
"""

TOML = f"""\
command = ["python3", "train.py", "--epochs", "3"]
[process]
cwd = "/tmp"
kill_timeout = 12.5
[process.env]
OMP_NUM_THREADS = "4"
WANDB_API_KEY = "{SECRET}"
[parsing]
parser = "keras"
iters_per_epoch = 100
[sinks]
jsonl = "/tmp/m.jsonl"
[watch]
dirs = ["ckpt", "more"]
poll = true
settle = 0.5
checkpoint_patterns = ["*.pt"]
policy = "every-2"
[upload]
to = "s3://backups/team"
drain_timeout = 30
concurrency = 4
[logging]
quiet = true
[run]
id = "exp-1"
"""

FLAGS = ["--cwd", "/tmp", "--kill-timeout", "12.5", "--parser", "keras", "--iters-per-epoch", "100",
         "--metrics", "/tmp/m.jsonl", "--watch", "ckpt", "--watch", "more", "--poll", "--settle", "0.5",
         "--checkpoint-pattern", "*.pt", "--upload-policy", "every-2", "--upload-to", "s3://backups/team",
         "--drain-timeout", "30", "--upload-concurrency", "4", "-q", "--run-id", "exp-1"]


def clean_env(**extra: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("TRAINVISOR_")}, **extra}


def tv(*args: str, cwd: Path, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(TRAINVISOR + list(args), capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=env or clean_env())


def show(tmp_path: Path, *args: str, env=None) -> str:
    proc = tv("config", "show", *args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_yaml_toml_and_flags_give_the_same_effective_configuration(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    (tmp_path / "c.toml").write_text(TOML)
    from_yaml = show(tmp_path, "--config", "c.yaml")
    from_toml = show(tmp_path, "--config", "c.toml")
    # the child's env holds a secret: flags cannot set env, so compare with it in a file of its own
    (tmp_path / "env.yaml").write_text(f"process: {{env: {{OMP_NUM_THREADS: '4', WANDB_API_KEY: {SECRET}}}}}\n")
    from_flags = show(tmp_path, "--config", "env.yaml", *FLAGS, "--", "python3", "train.py", "--epochs", "3")
    assert from_yaml == from_toml == from_flags
    assert 'kill_timeout: 12.5' in from_yaml and 'dirs: ["ckpt", "more"]' in from_yaml
    assert SECRET not in from_yaml and 'WANDB_API_KEY: "***"' in from_yaml and 'OMP_NUM_THREADS: "4"' in from_yaml
    expected = RunConfig(command=("python3", "train.py", "--epochs", "3"),
                         process=ProcessConfig(cwd="/tmp", kill_timeout=12.5,
                                               env={"OMP_NUM_THREADS": "4", "WANDB_API_KEY": SECRET}))
    loaded = RunConfig.from_file(str(tmp_path / "c.toml"))
    assert loaded.process == expected.process and loaded.command == expected.command
    assert loaded.watch == WatchConfig(dirs=("ckpt", "more"), poll=True, settle=0.5, checkpoint_patterns=("*.pt",),
                                       policy="every-2")
    assert loaded == RunConfig.from_file(str(tmp_path / "c.yaml"))


@pytest.mark.parametrize("fmt", ["yaml", "toml"])
def test_config_show_reads_back_unchanged(tmp_path, fmt):
    printed = show(tmp_path, "--format", fmt, *FLAGS, "--", "python3", "train.py")
    (tmp_path / f"again.{fmt}").write_text(printed)
    assert show(tmp_path, "--format", fmt, "--config", f"again.{fmt}") == printed
    assert RunConfig.from_file(str(tmp_path / f"again.{fmt}")).upload == UploadConfig(
        to="s3://backups/team", drain_timeout=30.0, concurrency=4)


def test_flags_override_the_file_and_the_environment_overrides_the_file(tmp_path):
    (tmp_path / "c.yaml").write_text(YAML)
    env = clean_env(TRAINVISOR_CONFIG=str(tmp_path / "c.yaml"), TRAINVISOR__UPLOAD__CONCURRENCY="8")
    out = show(tmp_path, "--settle", "7", "--no-summary", env=env)
    assert "settle: 7.0" in out and "summary: false" in out
    assert "concurrency: 8" in out and "kill_timeout: 12.5" in out  # env over file; file over defaults
    cfg = RunConfig.from_env(env)
    assert cfg.upload.concurrency == 8 and cfg.process.kill_timeout == 12.5 and cfg.parsing.parser == "keras"


BAD = [
    ("unknown key", "watch:\n  dirs: [a]\n  setle: 3\n", "c.yaml:3: watch.setle: unknown key (did you mean 'settle'?)"),
    ("wrong type", "process:\n  kill_timeout: soon\n",
     "c.yaml:2: process.kill_timeout: must be a number, got a string 'soon'"),
    ("bad value", "upload:\n  drain_timeout: -3\n", "c.yaml:2: upload.drain_timeout: must not be negative (got -3.0)"),
    ("nan timeout", "process:\n  kill_timeout: .nan\n", "c.yaml:2: process.kill_timeout: must be a finite number"),
    ("bad syntax", "watch:\n  dirs: [a\n  poll: true\n", "c.yaml:3: bad YAML:"),
    ("bad policy", "watch:\n  policy: sometimes\n", "c.yaml:2: watch.policy: must be all, epoch-end, every-N"),
    ("not a table", "- a\n- b\n", "c.yaml: the top level must be a table of settings"),
]


@pytest.mark.parametrize("case, text, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_config_is_one_line_naming_key_and_file_and_the_child_never_starts(tmp_path, case, text, message):
    (tmp_path / "c.yaml").write_text(text)
    proc = tv("run", "--config", "c.yaml", "--run-dir", "r", "--", sys.executable, "-c",
              "open('started', 'w')", cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainvisor: " + message), proc.stderr
    assert not (tmp_path / "started").exists() and not (tmp_path / "r").exists()


def test_numbers_in_a_command_are_its_words_as_in_env(tmp_path):
    """`command: [..., C, 20]` is the argv the user wrote: YAML's 20 and 0.5 arrive as "20" and "0.5"."""
    (tmp_path / "run.yaml").write_text(f"command: ['{sys.executable}', -c, 'import sys; print(sys.argv[1:])',"
                                       " C, 20, 0.5]\nrun: {dir: r}\n")
    proc = tv("run", "-q", "--config", "run.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "['C', '20', '0.5']\n"
    (tmp_path / "run.toml").write_text(f"command = ['{sys.executable}', '-c', 'import sys; print(sys.argv[1:])', 7]\n")
    assert tv("run", "-q", "--config", "run.toml", "--run-dir", "r2", cwd=tmp_path).stdout == "['7']\n"
    (tmp_path / "bool.yaml").write_text(f"command: ['{sys.executable}', train.py, --resume, yes]\n")
    bad = tv("run", "--config", "bool.yaml", "--run-dir", "r3", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr == ("trainvisor: bool.yaml:1: command: item 4 (True) must be a string "
                                                  "or a number (quote it to keep it as written)\n")


def test_a_bad_toml_value_names_the_file_and_key(tmp_path):
    (tmp_path / "c.toml").write_text("[upload]\nconcurrency = 0\n")
    proc = tv("run", "--config", "c.toml", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "trainvisor: c.toml: upload.concurrency: must be between 1 and 64 (got 0)\n"
    (tmp_path / "s.toml").write_text("[upload\nconcurrency = 1\n")
    proc = tv("run", "--config", "s.toml", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("trainvisor: s.toml: bad TOML: ") and "line 1" in proc.stderr


def test_an_unreadable_config_file_is_one_line(tmp_path):
    proc = tv("run", "--config", "missing.yaml", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "trainvisor: cannot read config file missing.yaml: No such file or directory\n"


def test_a_misspelled_option_is_an_error_not_the_command(tmp_path):
    proc = tv("run", "--kil-timeout", "5", "--", "true", cwd=tmp_path)
    assert proc.returncode == 2 and "No such option '--kil-timeout'" in proc.stderr
    assert not (tmp_path / "trainvisor-runs").exists()


def test_invalid_values_in_python_fail_where_they_are_written():
    for make, message in [(lambda: ProcessConfig(kill_timeout=-1), "process.kill_timeout: must not be negative"),
                          (lambda: ProcessConfig(kill_timeout=float("inf")), "must be a finite number"),
                          (lambda: UploadConfig(drain_timeout=float("nan")), "upload.drain_timeout"),
                          (lambda: WatchConfig(settle="2"), "watch.settle: must be a number"),
                          (lambda: RunConfig(command="python train.py"), "command: must be a list of strings")]:
        with pytest.raises(ConfigError, match=message):
            make()


def test_a_config_file_alone_describes_a_run_and_no_secret_reaches_the_run_log(tmp_path):
    (tmp_path / "run.yaml").write_text(
        f"command: ['{sys.executable}', -c, 'import os; print(\"key\", len(os.environ[\"WANDB_API_KEY\"]))']\n"
        f"process: {{env: {{WANDB_API_KEY: {SECRET}}}}}\nrun: {{dir: r}}\nlogging: {{summary: true}}\n")
    proc = tv("run", "--config", "run.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"key {len(SECRET)}\n"  # the child got the real value
    run_log = (tmp_path / "r" / "train.log").read_text()
    assert '"WANDB_API_KEY": "***"' in run_log
    for text in (run_log, proc.stderr, (tmp_path / "r" / "metrics.jsonl").read_text()):
        assert SECRET not in text
    (tmp_path / "bad.yaml").write_text(f"process: {{env: {{WANDB_API_KEY: {SECRET}}}, kill_timeout: x}}\n")
    bad = tv("run", "--config", "bad.yaml", "--", "true", cwd=tmp_path)
    assert bad.returncode == 2 and SECRET not in bad.stderr


def test_a_password_in_an_upload_url_is_masked_when_shown(tmp_path):
    out = show(tmp_path, "--upload-to", f"s3://AKIAEXAMPLE:{SECRET}@bucket/p", "--", "true")
    assert SECRET not in out and 'to: "s3://AKIAEXAMPLE:***@bucket/p"' in out


def test_the_config_accepts_exactly_the_supervisors_death_choices():
    from trainvisor.supervisor import ON_SUPERVISOR_DEATH

    assert set(ON_SUPERVISOR_DEATH) == {"term", "keep"}
    assert ProcessConfig(on_supervisor_death="keep").on_supervisor_death == "keep"
    with pytest.raises(ConfigError, match="process.on_supervisor_death: must be one of term, keep"):
        ProcessConfig(on_supervisor_death="stop")


def test_a_config_or_rules_file_over_the_size_limit_is_one_line(tmp_path):
    # A 50 MB config file was read for 23 s (215 MB); a larger-than-sane file is refused at once.
    from trainvisor.config import RunConfig
    from trainvisor.defaults import SETTINGS_FILE_LIMIT
    from trainvisor.errors import ConfigError, ParserError
    from trainvisor.parsers.rules import load_rules

    big = tmp_path / "big.yaml"
    big.write_bytes(b"# padding\n" * (SETTINGS_FILE_LIMIT // 10 + 1))
    with pytest.raises(ConfigError) as err:
        RunConfig.from_file(str(big))
    assert str(err.value) == f"config file {big}: larger than 1 MiB; a configuration is a few keys (is this the right file?)"
    with pytest.raises(ParserError) as err:
        load_rules(str(big))
    assert str(err.value) == f"{big}: larger than 1 MiB; a rules file is a few rules (is this the right file?)"
    ok = tmp_path / "ok.yaml"
    ok.write_bytes(b"# padding\n" * (SETTINGS_FILE_LIMIT // 10 - 10) + b"parsing: {parser: caffe}\n")
    assert RunConfig.from_file(str(ok)).parsing.parser == "caffe"  # just under the limit: read
