"""The configuration a run directory was last started with (RUN_DIR/config.yaml), so that
`trainvisor resume RUN_DIR` knows where the checkpoints go without being told again.

Secrets are masked in the saved file like everywhere else; resuming needs none of them (the
child is not started again, and store credentials come from the environment)."""
from __future__ import annotations

import os
from pathlib import Path

from ..config import RunConfig
from ..config.dump import dump
from ..errors import ConfigError

__all__ = ["save_config", "load_saved_config", "SAVED_CONFIG_NAME"]

SAVED_CONFIG_NAME = "config.yaml"


def save_config(config: RunConfig, run_dir: Path) -> None:
    tmp = run_dir / (SAVED_CONFIG_NAME + ".tmp")
    tmp.write_text(dump(config, "yaml"), encoding="utf-8")
    os.replace(tmp, run_dir / SAVED_CONFIG_NAME)


def load_saved_config(run_dir: Path) -> RunConfig:
    """The saved configuration, without the child's environment and the sinks' options (masked,
    and not needed)."""
    import yaml

    path = run_dir / SAVED_CONFIG_NAME
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise ConfigError(f"{run_dir} is not a trainvisor run directory (no {SAVED_CONFIG_NAME})") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if isinstance(data.get("process"), dict):
        data["process"].pop("env", None)
    if isinstance(data.get("sinks"), dict):
        data["sinks"].pop("options", None)  # may hold masked secrets; resuming starts no sink
    return RunConfig.from_dict(data, source=str(path))
