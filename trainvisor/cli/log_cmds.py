"""`trainvisor replay`, `parse` and `parsers`: saved logs through the same pipeline as a live run."""
from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any, Optional

import click

from ..config import ParsingConfig
from ..config.convert import from_dict
from ..errors import ConfigError
from .flags import PARSING_FLAGS, overrides, with_flags

__all__ = ["replay", "parse", "parsers_command"]


def _parsing(flag_values: dict[str, Any]) -> dict[str, Any]:
    """The parsing flags, checked like a config file (an error names the flag), as the keywords
    of `trainvisor.replay` and `parse_tables` (the parsing section's keys)."""
    layer = overrides(click.get_current_context(), PARSING_FLAGS, flag_values)
    cfg = from_dict(ParsingConfig, layer.data.get("parsing", {}),
                    locations={k[1:]: v for k, v in layer.locations.items()})
    return {f.name: getattr(cfg, f.name) for f in fields(cfg)}


@click.command()
@with_flags(PARSING_FLAGS)
@click.option("--metrics", "metrics_path", type=click.Path(dir_okay=False), default=None,
              help="Write JSONL here (default: standard output).")
@click.option("--summary/--no-summary", default=False, help="Print a summary to stderr at the end.")
@click.option("--stop-when", "stop_when", multiple=True, metavar="RULE",
              help="Say where a live run with these stop rules would have stopped (the log is read to its end). "
                   "Repeatable.")
@click.option("--check", "golden", type=click.Path(dir_okay=False), default=None, metavar="GOLDEN",
              help="Compare the metric stream with this golden JSONL file (wall-clock fields aside) instead of "
                   "printing it; differences are shown and exit with 1.")
@click.option("--update-golden", is_flag=True, help="With --check: (re)write the golden file from this log.")
@click.argument("log_path", metavar="LOG", type=click.Path(dir_okay=False))
def replay(flag_values: dict[str, Any], metrics_path: Optional[str], summary: bool, stop_when: tuple[str, ...],
           golden: Optional[str], update_golden: bool, log_path: str) -> None:
    """Parse a saved LOG through the same pipeline as a live run."""
    from ..calls.logs import replay as replay_log
    from ..sinks.stats import StatsSink
    from ..summary import format_replay_summary

    if update_golden and golden is None:
        raise ConfigError("--update-golden needs --check GOLDEN (the file to write)")
    counts = StatsSink()
    stops = _stop_rules(stop_when)
    metrics = metrics_path or (None if golden else sys.stdout)
    done = replay_log(log_path, **_parsing(flag_values), metrics=metrics,
                      sinks=([counts] if summary else []) + ([stops] if stops else []), keep_events=golden is not None)
    if summary:
        click.echo(format_replay_summary(done.stats, counts, metrics_path=metrics_path or "-"), err=True)
    if stops:
        _say_stop(stops.rules)
    if golden is not None:
        _check_golden(done.events, golden, update_golden)


def _stop_rules(rules: tuple[str, ...]) -> Any:
    """The rules a replay evaluates (a bad one: ConfigError, exit 2, before the log is read).
    `no metric for` is left out: a saved log carries no time a replay could measure silence by."""
    if not rules:
        return None
    from ..stoprules import StopRules, StopRuleSink, parse_rule
    from ..stoprules.grammar import Silence

    specs = [parse_rule(r) for r in rules]
    for spec in specs:
        if isinstance(spec, Silence):
            click.echo(f"trainvisor: stop rule {spec.text!r} is not evaluated in a replay (no live timing)", err=True)
    return StopRuleSink(StopRules([s for s in specs if not isinstance(s, Silence)]), lambda firing: None)


def _say_stop(rules: Any) -> None:
    fired = rules.fired
    click.echo(f"trainvisor: a live run would have stopped: {fired.describe()}" if fired is not None
               else "trainvisor: no stop rule fired", err=True)
    for rule in rules.unmatched():
        click.echo(f"trainvisor: stop rule {rule!r} never applied: no metric it names was parsed", err=True)


def _check_golden(events: tuple, golden: str, update: bool) -> None:
    """`--check GOLDEN`: one line when the stream matches; the difference and exit 1 when not."""
    from ..testing.golden import compare_golden, format_diff, golden_records, read_golden, write_golden

    now = golden_records(events)
    if update:
        write_golden(golden, now)
        click.echo(f"wrote {golden} ({len(now)} records)", err=True)
        return
    diff = compare_golden(read_golden(golden), now)
    click.echo(format_diff(diff, golden), err=True)
    if not diff.equal:
        sys.exit(1)


@click.command()
@with_flags(PARSING_FLAGS)
@click.option("--jsonl", "jsonl", is_flag=True, help="Print the metric stream as JSON lines on standard output.")
@click.option("--csv", "csv_dir", type=click.Path(file_okay=False), default=None,
              help="Write LOG.train and LOG.test here, in Caffe parse_log.py's layout (= --format csv -o DIR).")
@click.option("--format", "layout", type=click.Choice(["csv", "sh"]), default=None,
              help="Table layout: csv (parse_log.py's CSV) or sh (parse_log.sh's, read by plot_training_log.py).")
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write the tables (LOG.train, LOG.test) in this directory.")
@click.argument("log_path", metavar="LOG", type=click.Path(dir_okay=False))
def parse(flag_values: dict[str, Any], jsonl: bool, csv_dir: Optional[str], layout: Optional[str],
          out_dir: Optional[str], log_path: str) -> None:
    """Parse a saved LOG into tables (--csv DIR, --format sh -o DIR) or a metric stream (--jsonl)."""
    from ..calls.logs import parse_tables, replay as replay_log
    from ..sinks.jsonl import JsonlSink

    layout, out_dir = _table_target(csv_dir, layout, out_dir)
    if out_dir is None and not jsonl:
        # Word for word as before (tests pin it); --help shows --format.
        raise ConfigError("nothing to write: give --jsonl, --csv OUTDIR or --format sh -o OUTDIR")
    options = _parsing(flag_values)
    if out_dir is None:
        replay_log(log_path, **options, metrics=sys.stdout, keep_events=False)
        return
    tables = parse_tables(log_path, out_dir, layout=layout, **options, sinks=[JsonlSink(sys.stdout)] if jsonl else [])
    for path in tables.paths:
        click.echo(f"wrote {path}", err=True)
    if not tables.found:
        what = "the tables have a header only" if tables.paths else "nothing written"
        click.echo(f"trainvisor: no Caffe metrics found in {log_path}; {what}", err=True)


def _table_target(csv_dir: Optional[str], layout: Optional[str],
                  out_dir: Optional[str]) -> tuple[str, Optional[str]]:
    """(layout, directory) from --csv DIR, --format and -o: --csv DIR is --format csv -o DIR."""
    if csv_dir is not None:
        if out_dir is not None:
            raise ConfigError("give the tables' directory once: --csv DIR or -o DIR")
        if layout == "sh":
            raise ConfigError("--csv writes parse_log.py's CSV; for parse_log.sh's layout use --format sh -o DIR")
        return "csv", csv_dir
    if layout is not None and out_dir is None:
        raise ConfigError(f"--format {layout} needs -o OUTDIR (where to write LOG.train and LOG.test)")
    return layout or "csv", out_dir


@click.command("parsers")
def parsers_command() -> None:
    """List the available parsers with a one-line description each."""
    from ..parsers import available_parsers

    for name, description in available_parsers():
        click.echo(f"{name:<12} {description}")
