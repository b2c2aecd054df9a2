"""``zabd pipeline``: Spark sweeps of simulated scenarios and audits of real logs.

    zabd pipeline sweep --scenarios N --out DIR [--seed S] [--nodes 3,5,7] [--rounds R,...]
                        [--proposals K,...] [--faults-per-run F,...] [--variant canonical|server|pipeline]
                        [--workload raw|zk] [--changes-per-run C] [--plant BUG] [--task-size T] [--master URL]
                        [--quiet] [--no-plots]
    zabd pipeline sweep --grid FILE.toml [--out DIR] [--master URL] ...
    zabd pipeline audit DIR... [--out DIR] [--master URL] [--quiet]
    zabd pipeline handmade NAME      (replay a hand-made checker input: lost-commit, agreement, clean)

Sweep defaults: --seed 0 --nodes 3,5,7 --rounds 2000 --proposals 20
--faults-per-run 4; --master local[*]. Details: docs/pipeline.md.

Options are ``--name value`` as in ``zabd sim``. Usage errors: one line on
stderr, exit 2. pyspark is an optional extra: without it (or without Java)
the Spark commands print one line and exit 2; this module imports pyspark only
after the arguments are checked.
"""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass, field

from zabd.pipeline.grid import INT63_MAX, MAX_FAULTS_PER_RUN, U64_MAX, GridError, make_grid, parse_int_csv

USAGE = "usage: zabd pipeline {sweep|audit|handmade} ... (see zabd pipeline --help)"


class UsageError(Exception):
    pass


@dataclass(slots=True)
class Parsed:
    values: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    positional: list[str] = field(default_factory=list)


def parse_options(
    argv: list[str], value_options: tuple[str, ...], flag_options: tuple[str, ...], positional: bool = False
) -> Parsed:
    p = Parsed()
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            if positional:
                p.positional.append(token)
                i += 1
                continue
            raise UsageError(f"unexpected argument {token!r}; options are --name value")
        name = token[2:]
        if name in flag_options:
            if name in p.flags:
                raise UsageError(f"option {token} given twice")
            p.flags.add(name)
            i += 1
            continue
        if name not in value_options:
            raise UsageError(f"unknown option {token}")
        if name in p.values:
            raise UsageError(f"option {token} given twice")
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            raise UsageError(f"option {token} needs a value")
        p.values[name] = argv[i + 1]
        i += 2
    return p


def _decimal(name: str, text: str, lo: int, hi: int) -> int:
    if not text.isascii() or not text.isdigit():
        raise UsageError(f"--{name}: {text!r} is not a plain decimal number")
    value = int(text)
    if not lo <= value <= hi:
        raise UsageError(f"--{name}: {text} is outside {lo}..={hi}")
    return value


def spark_unavailable() -> str | None:
    """Why Spark cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed; install the extra: pip install 'zabd[pipeline]'"
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        return "Spark needs Java and none was found (PATH, JAVA_HOME); bash scripts/install.sh installs a JRE"
    return None


# -------------------------------------------------------------------- sweep

SWEEP_GRID_OPTIONS = (
    "scenarios", "seed", "nodes", "rounds", "proposals", "faults-per-run", "variant", "workload", "changes-per-run",
    "plant",
)
SWEEP_OPTIONS = (*SWEEP_GRID_OPTIONS, "grid", "out", "master", "task-size")
SWEEP_FLAGS = ("quiet", "no-plots")



def _spark_ready(prog: str) -> bool:
    """Whether Spark can run here; if not, one line on stderr says why."""
    why = spark_unavailable()
    if why is not None:
        print(f"{prog}: {why}", file=sys.stderr)
    return why is None

def sweep_main(argv: list[str]) -> int:
    from zabd.pipeline.grid import Grid, load_grid_file

    try:
        p = parse_options(argv, SWEEP_OPTIONS, SWEEP_FLAGS)
        extra: dict[str, object] = {}
        grid: Grid
        if "grid" in p.values:
            clash = [f"--{n}" for n in SWEEP_GRID_OPTIONS if n in p.values]
            if clash:
                raise UsageError(f"{clash[0]} conflicts with --grid (put it in the grid file)")
            grid, extra = load_grid_file(p.values["grid"])
        else:
            if "scenarios" not in p.values:
                raise UsageError("missing option --scenarios (or --grid FILE)")
            values: dict[str, object] = {
                "scenarios": _decimal("scenarios", p.values["scenarios"], 1, INT63_MAX),
            }
            if "seed" in p.values:
                values["seed"] = _decimal("seed", p.values["seed"], 0, INT63_MAX)
            limits = {
                "nodes": (1, 255),
                "rounds": (1, U64_MAX),
                "proposals": (0, U64_MAX),
                "faults-per-run": (0, MAX_FAULTS_PER_RUN),
            }
            for name, (lo, hi) in limits.items():
                if name in p.values:
                    values[name.replace("-", "_")] = list(parse_int_csv(f"--{name}", p.values[name], lo, hi))
            for name in ("variant", "workload", "plant"):
                if name in p.values:
                    values[name] = p.values[name]
            if "changes-per-run" in p.values:
                values["changes_per_run"] = _decimal("changes-per-run", p.values["changes-per-run"], 0,
                                                     MAX_FAULTS_PER_RUN)  # fmt: skip
            grid = make_grid(values)
        out = p.values.get("out", extra.get("out"))
        if not isinstance(out, str) or not out:
            raise UsageError("missing option --out DIR")
        if os.path.exists(out) and not os.path.isdir(out):
            raise UsageError(f"--out: {out!r} exists and is not a directory")
        task_size: int | None = None
        if "task-size" in p.values:
            task_size = _decimal("task-size", p.values["task-size"], 1, INT63_MAX)
        elif isinstance(extra.get("task_size"), int):
            task_size = extra["task_size"]  # type: ignore[assignment]
        if grid.total == 0:
            raise UsageError("the grid has no scenarios (scenarios = 0 and no canaries)")
    except (UsageError, GridError) as exc:
        print(f"zabd pipeline sweep: {exc}", file=sys.stderr)
        return 2
    if not _spark_ready("zabd pipeline sweep"):
        return 2
    return run_sweep_cli(
        grid, out, p.values.get("master"), task_size, "quiet" not in p.flags, "no-plots" not in p.flags
    )


def run_sweep_cli(
    grid: object, out: str, master: str | None, task_size: int | None, progress: bool, plots: bool
) -> int:
    from zabd.pipeline.grid import Grid
    from zabd.pipeline.report import format_streams, format_table
    from zabd.pipeline.session import describe_error, get_session
    from zabd.pipeline.sweep import sweep

    assert isinstance(grid, Grid)
    try:
        spark = get_session(master)
        report = sweep(spark, grid, out, task_size=task_size, progress=progress, plots=plots)
    except Exception as exc:  # a Spark/JVM failure: one line, not a Py4J page
        print(f"zabd pipeline sweep: failed: {describe_error(exc)}", file=sys.stderr)
        return 1
    print(format_table(report.cells))
    if grid.variant == "pipeline":
        print(format_streams(report.streams))
    rate = report.scenarios / report.seconds if report.seconds > 0 else 0.0
    print(
        f"{report.scenarios:,} scenarios in {report.tasks} tasks, {report.seconds:.1f} s ({rate:,.0f}/s); "
        f"rows: {os.path.join(out, 'scenarios.parquet')}; plots: {', '.join(report.plots) or 'none'}"
    )
    if report.failures:
        print(f"zabd pipeline sweep: {report.failures} scenario(s) violated safety or failed:", file=sys.stderr)
        for r in report.failed_rows:
            what = f"{r['violation_kind']}: {r['violation_detail']}" if r["violation_kind"] else f"error: {r['error']}"
            print(f"  #{r['index']} {r['kind']} ({r['nodes']} nodes) {what}", file=sys.stderr)
            print(f"    reproduce: {r['reproducer']}", file=sys.stderr)
        if report.failures > len(report.failed_rows):
            print(
                f"  ... {report.failures - len(report.failed_rows)} more in the Parquet rows (ok = false)",
                file=sys.stderr,
            )
        return 1
    return 0


# -------------------------------------------------------------------- audit

AUDIT_OPTIONS = ("out", "master")
AUDIT_FLAGS = ("quiet",)


def audit_main(argv: list[str]) -> int:
    try:
        p = parse_options(argv, AUDIT_OPTIONS, AUDIT_FLAGS, positional=True)
        if not p.positional:
            raise UsageError("expected one or more data directories: zabd pipeline audit DIR...")
        for d in p.positional:
            if not os.path.isdir(d):
                raise UsageError(f"data directory {d!r} does not exist or is not a directory")
            if not any(os.path.exists(os.path.join(d, part)) for part in ("log", "snap", "epochs")):
                raise UsageError(f"{d!r} is not a zabd data directory (expected log/, snap/ or epochs in it)")
        if len(set(map(os.path.realpath, p.positional))) != len(p.positional):
            raise UsageError("a data directory is listed twice")
    except UsageError as exc:
        print(f"zabd pipeline audit: {exc}", file=sys.stderr)
        return 2
    if not _spark_ready("zabd pipeline audit"):
        return 2
    from zabd.pipeline.audit import audit, format_audit
    from zabd.pipeline.session import Progress, describe_error, get_session

    try:
        spark = get_session(p.values.get("master"))
        if "quiet" in p.flags:
            report = audit(spark, p.positional, out_dir=p.values.get("out"))
        else:
            with Progress(spark, f"audit of {len(p.positional)} data directories", 0, ""):
                report = audit(spark, p.positional, out_dir=p.values.get("out"))
    except Exception as exc:  # a Spark/JVM failure or an unreadable directory: one line
        print(f"zabd pipeline audit: failed: {describe_error(exc)}", file=sys.stderr)
        return 1
    print(format_audit(report))
    if not report.ok:
        print(f"zabd pipeline audit: {len(report.problems)} problem(s): replicas disagree", file=sys.stderr)
        return 1
    return 0


# --------------------------------------------------------------- dispatcher


def main(argv: list[str]) -> int:
    if not argv:
        print(USAGE, file=sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "help"):
        print(__doc__.strip() if __doc__ else USAGE)
        return 0
    cmd, rest = argv[0], argv[1:]
    if cmd in ("sweep", "audit", "handmade") and any(a in ("-h", "--help") for a in rest):
        # no option of theirs takes a value that could be --help, and a DIR
        # named -h is reachable as ./-h
        print(__doc__.strip() if __doc__ else USAGE)
        return 0
    if cmd == "sweep":
        return sweep_main(rest)
    if cmd == "audit":
        return audit_main(rest)
    if cmd == "handmade":
        from zabd.pipeline.handmade import main as handmade_main

        return handmade_main(rest)
    print(f"zabd pipeline: unknown command {cmd!r}; expected sweep, audit or handmade", file=sys.stderr)
    return 2
