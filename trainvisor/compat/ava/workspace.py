"""Where an AVA job's files are: the workspace layout the AVA platform mounted at `/workspace`,
under a root the caller may move (`AVA_WORKSPACE`), so the same script runs on a laptop, in CI
and on the platform."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

__all__ = ["WORKSPACE_ENV", "DEFAULT_ROOT", "Workspace"]

WORKSPACE_ENV = "AVA_WORKSPACE"
DEFAULT_ROOT = "/workspace"


@dataclass(frozen=True)
class Workspace:
    """The AVA layout under `root`: `params/default.json` (the job's parameters), `data/train`,
    `data/val`, `data/test`, `model`, and `run/<training_ins_id>/` (`output` for snapshots,
    `logs`, `tmp`)."""

    root: Path

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "Workspace":
        env = os.environ if env is None else env
        return cls(Path(env.get(WORKSPACE_ENV) or DEFAULT_ROOT))

    @property
    def params_file(self) -> Path:
        return self.root / "params" / "default.json"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    def data(self, which: str) -> Path:
        return self.root / "data" / which

    @property
    def model_dir(self) -> Path:
        return self.root / "model"

    def run_dir(self, training_ins_id: str) -> Path:
        return self.root / "run" / training_ins_id
