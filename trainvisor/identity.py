"""`NodeIdentity`: which node of a multi-node run this trainvisor process is, and its ranks.

Why a trainvisor process needs to know: several machines of one run write checkpoint sets of the
same names (`snapshot_iter_1000`) into one store prefix, and their records land in one place
(Prometheus, a webhook, MLflow). Without the node in the store key, node 1's set overwrites node
0's; without it in the labels, two nodes' losses are one series.

Names, kept apart from what they could be confused with:
- `node`: the index of the machine (pod, host) in the job.
- `process_rank`: the world rank of *this trainvisor process* as its launcher numbered it (when
  trainvisor is started once per rank). Not `Metric.rank`, which is the rank a launcher wrote in
  front of a line of output (`[rank1]:`): one trainvisor around `torchrun` reads lines of every
  rank of its node, so its records carry many `rank`s and one `process_rank` (none, usually).
- `local_rank`: this process's rank on its node. Only local rank 0 (or a process with no local
  rank: one trainvisor per node, the launcher inside) uploads checkpoints, so a set written once
  on a node is uploaded once, however many trainvisor processes watch its folder.

Where each comes from, first found wins (a config key over every variable; `precedence()` is the
table, the README shows it):
- node: `run.node`; NODE_RANK (Lightning; what people export for `torchrun --node_rank`);
  GROUP_RANK (torchrun, for its workers: the agent group's rank, the node); SLURM_NODEID;
  JOB_COMPLETION_INDEX (a Kubernetes Indexed Job: one pod per index); RANK when no LOCAL_RANK,
  GROUP_RANK or LOCAL_WORLD_SIZE is set (Kubeflow's PyTorchJob gives each pod RANK = its index and
  nothing else; torchrun always sets the other three, and so this is the test Lightning's
  Kubeflow environment uses to tell the two apart).
- process_rank: `run.process_rank`; RANK; SLURM_PROCID.
- local_rank: `run.local_rank`; LOCAL_RANK; SLURM_LOCALID.

Pure: the environment and the config values come in as arguments.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Optional

from .errors import ConfigError

__all__ = ["NodeIdentity", "NODE_VARIABLES", "PROCESS_RANK_VARIABLES", "LOCAL_RANK_VARIABLES", "precedence"]

NODE_VARIABLES = ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID", "JOB_COMPLETION_INDEX")
PROCESS_RANK_VARIABLES = ("RANK", "SLURM_PROCID")
LOCAL_RANK_VARIABLES = ("LOCAL_RANK", "SLURM_LOCALID")
_TORCHRUN_MARKS = ("LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE")
"""Set by torchrun for every worker: with any of them, RANK is a process's rank, not a node's."""


class NodeIdentity(NamedTuple):
    """This process's place in a multi-node run; every field None on a single machine. A
    NamedTuple: every run defines it, and a frozen dataclass costs ~0.5 ms to define."""

    node: Optional[int] = None
    process_rank: Optional[int] = None
    local_rank: Optional[int] = None
    node_from: str = ""
    """Where `node` came from (`run.node`, `NODE_RANK`, ...): said in the run log."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], *, node: Optional[int] = None,
                     process_rank: Optional[int] = None, local_rank: Optional[int] = None) -> "NodeIdentity":
        """The identity from the config's values (`run.node`, `run.process_rank`,
        `run.local_rank`: they win) and the launchers' variables. ConfigError (one line, naming the
        variable) when the variable that would be used is not a whole number 0 or more."""
        node_from = "run.node" if node is not None else ""
        if node is None:
            name = _first(environ, NODE_VARIABLES)
            if name is None and environ.get("RANK", "").strip() and not any(v in environ for v in _TORCHRUN_MARKS):
                name = "RANK"  # one process per pod (Kubeflow PyTorchJob): its rank is the node's
            if name is not None:
                node, node_from = _whole(environ, name), name
        if process_rank is None:
            process_rank = _value(environ, PROCESS_RANK_VARIABLES)
        if local_rank is None:
            local_rank = _value(environ, LOCAL_RANK_VARIABLES)
        return cls(node, process_rank, local_rank, node_from)

    @property
    def is_set(self) -> bool:
        return self.node is not None or self.process_rank is not None

    @property
    def uploads(self) -> bool:
        """Whether this process uploads checkpoint sets: local rank 0, or no local rank."""
        return self.local_rank is None or self.local_rank == 0

    @property
    def folder(self) -> str:
        """The store folder below the run's (`node-<n>`), "" with no node: a single-node run keeps
        the layout it always had."""
        return "" if self.node is None else f"node-{self.node}"

    def fields(self) -> dict[str, int]:
        """What records and labels carry: `node` and `process_rank`, each only when known."""
        return {k: v for k, v in (("node", self.node), ("process_rank", self.process_rank)) if v is not None}

    def describe(self) -> str:
        parts = [f"{k} {v}" for k, v in (("node", self.node), ("process rank", self.process_rank),
                                          ("local rank", self.local_rank)) if v is not None]
        return ", ".join(parts) + (f" (node from {self.node_from})" if self.node_from else "")


def precedence() -> dict[str, tuple[str, ...]]:
    """Each field's sources, first wins (RANK for the node only without torchrun's variables)."""
    return {"node": ("run.node", *NODE_VARIABLES, "RANK"),
            "process_rank": ("run.process_rank", *PROCESS_RANK_VARIABLES),
            "local_rank": ("run.local_rank", *LOCAL_RANK_VARIABLES)}


def _first(environ: Mapping[str, str], names: tuple[str, ...]) -> Optional[str]:
    return next((n for n in names if environ.get(n, "").strip() != ""), None)


def _value(environ: Mapping[str, str], names: tuple[str, ...]) -> Optional[int]:
    name = _first(environ, names)
    return None if name is None else _whole(environ, name)


def _whole(environ: Mapping[str, str], name: str) -> int:
    text = environ[name].strip()
    if not text.isascii() or not text.isdigit():
        raise ConfigError(f"{name}={environ[name]!r}: a node or rank must be a whole number, 0 or more")
    return int(text)
