"""The import rules of docs/architecture.md, read from the code itself (every import statement,
at module level or deferred inside a function): a rule that is only written down drifts."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "trainvisor"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(module imported, at module level?) for each import in `path`, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    me = _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    top = {id(node) for node in tree.body}
    guarded = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
               for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue  # typing only: never executed
        at_top = id(node) in top or any(id(node) in {id(c) for c in ast.walk(t)} for t in tree.body
                                        if isinstance(t, (ast.Try, ast.If)))
        if isinstance(node, ast.Import):
            out += [(alias.name, at_top) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.append((name, at_top))
            out += [(f"{name}.{alias.name}", at_top) for alias in node.names]  # `from . import x` imports x
    return out


MODULES = {_module_name(p): _imports(p) for p in sorted(PACKAGE.rglob("*.py"))}


def _in(module: str, area: str) -> bool:
    return module == area or module.startswith(area + ".")


def _offenders(area: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} imports {target}" for m, imports in MODULES.items() if _in(m, area)
                  for target, _ in imports if any(_in(target, f) for f in forbidden))


def test_the_supervisor_makes_bytes_and_imports_no_parser_or_sink():
    assert _offenders("trainvisor.supervisor", ("trainvisor.parsers", "trainvisor.sinks")) == []


def test_parsers_import_no_module_of_the_stream_engine():
    """Parsers read `LineBlock`s (events.py, with the other records); the engine feeds them."""
    assert _offenders("trainvisor.parsers", ("trainvisor.stream", "trainvisor.supervisor", "trainvisor.run")) == []


def test_sinks_never_import_parsers_and_only_the_cli_imports_click():
    assert _offenders("trainvisor.sinks", ("trainvisor.parsers",)) == []
    clicks = sorted(m for m, imports in MODULES.items() if not _in(m, "trainvisor.cli")
                    for target, _ in imports if _in(target, "click"))
    assert clicks == []


def test_no_import_cycle_at_module_level():
    """Deferred imports (inside a function) may point back up, as the parser registry's loading of
    the built-in parsers does (`parsers/__init__.py` imports `builtin` when first asked); imports
    that run when a module is loaded form no cycle."""
    graph = {m: {t for t, top in imports if top and t in MODULES and t != m} for m, imports in MODULES.items()}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                cycles.append(" -> ".join(cycle))
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert cycles == []


@pytest.mark.parametrize("module", ["trainvisor.stream.engine", "trainvisor.stream.pipeline", "trainvisor.stream.source"])
def test_the_engine_reaches_no_process_code(module):
    assert [t for t, _ in MODULES[module] if _in(t, "trainvisor.supervisor") or _in(t, "trainvisor.run")] == []


def test_stop_rules_read_only_the_records_and_the_errors():
    """The rule engine is pure (the lead may expose it as a timeline callback): events and errors only."""
    imported = sorted({t for m, imports in MODULES.items() if _in(m, "trainvisor.stoprules")
                       for t, _ in imports if _in(t, "trainvisor") and not _in(t, "trainvisor.stoprules")})
    assert imported == ["trainvisor.errors", "trainvisor.errors.ConfigError", "trainvisor.events",
                        "trainvisor.events.Metric"]


def test_nothing_imports_the_compat_layer_and_it_loads_no_sdk_at_module_level():
    """`compat/` sits on top, beside cli/ and testing/: trainvisor never depends on it, and importing
    it loads no store SDK, TensorBoard or MXNet (they load when a destination or a sink is used)."""
    assert sorted(f"{m} imports {t}" for m, imports in MODULES.items() if not _in(m, "trainvisor.compat")
                  for t, _ in imports if _in(t, "trainvisor.compat")) == []
    heavy = ("boto3", "botocore", "qiniu", "requests", "tensorboardX", "tensorboard", "mxnet", "mlflow")
    assert sorted(f"{m} imports {t}" for m, imports in MODULES.items() if _in(m, "trainvisor.compat")
                  for t, at_top in imports if at_top and any(_in(t, h) for h in heavy)) == []


# What `trainvisor run` loads, read from a real run: a module that only some runs use is imported
# by the feature that needs it (bench/startup.py measures what each one costs every run).
NOT_IN_A_PLAIN_RUN = (
    "hashlib", "secrets", "sqlite3", "csv",  # the log socket's name, the upload journal, metric files
    "trainvisor.uploaders", "trainvisor.uploaders.journal", "trainvisor.uploaders.ratelimit",  # no --upload-to
    "trainvisor.watch.policy", "trainvisor.checkpoints",
    "trainvisor.run.follow", "trainvisor.parsers.metricfiles",  # no --follow
    "trainvisor.supervisor.leftovers",  # a new run directory: no earlier attempt's processes to end
    "trainvisor.stoprules", "trainvisor.timeline",  # no stop rules, no callbacks
    "ctypes",  # prctl and sigaction through _native/_proc.c
    "trainvisor.cli.config_cmd",  # `config show`'s click options
)
_LOADED = ("import atexit, runpy, sys\n"
           "out, sys.argv = sys.argv[1], ['trainvisor'] + sys.argv[2:]\n"
           "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
           "runpy.run_module('trainvisor', run_name='__main__')\n")


def _modules_of_run(tmp_path, child: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    loaded = tmp_path / "modules.txt"
    done = subprocess.run([sys.executable, "-c", _LOADED, str(loaded), "run", "-q", "--run-dir", str(tmp_path / "run"),
                           "--", sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    return done, set(loaded.read_text().split())


def test_a_plain_run_loads_no_module_of_a_feature_it_does_not_use(tmp_path):
    done, modules = _modules_of_run(tmp_path, "import sys; print('loss: 0.25'); sys.exit(3)")
    assert done.returncode == 3, done.stderr  # the child's status; the atexit handler ran before the exit
    assert done.stdout == "loss: 0.25\n"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["name"], r["value"]) for r in records] == [("loss", 0.25)]  # parsed as ever
    assert "trainvisor.run.run" in modules and "trainvisor.logging.writer" in modules
    assert {"trainvisor.parsers.auto", "trainvisor.parsers.generic"} <= modules  # made at the first output
    assert sorted(m for m in NOT_IN_A_PLAIN_RUN if m in modules) == []


def test_the_parser_is_made_at_the_first_output_so_a_silent_child_loads_none(tmp_path):
    done, modules = _modules_of_run(tmp_path, "pass")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    assert sorted(m for m in modules if _in(m, "trainvisor.parsers") and m not in ("trainvisor.parsers",
                                                                                   "trainvisor.parsers.base")) == []
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert (summary["exit_code"], summary["lines"], summary["events"]) == (0, 0, 0)
    assert " (parser auto, metrics " in (tmp_path / "run" / "train.log").read_text()  # named, though not made
