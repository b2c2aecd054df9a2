"""Run scenarios and turn them into rows: the executor side of a sweep.

Pure Python plus (lazily) pyarrow: the Spark job and the ``multiprocessing``
baseline of the benchmark call the same :func:`run_task`, so they compute
exactly the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from zabd.pipeline.grid import Grid, Task
from zabd.pipeline.handmade import HANDMADE, run_handmade
from zabd.sim.checker import Violation
from zabd.sim.faults import Cut, format_faults, pipeline_faults, random_changes, random_faults
from zabd.sim.run import run_scenario
from zabd.sim.simulator import SimConfig, variant_options

# (name, type, nullable). Types are Spark SQL names; ARROW maps them.
COLUMNS: tuple[tuple[str, str, bool], ...] = (
    ("sweep_seed", "long", False),
    ("index", "long", False),
    ("kind", "string", False),  # "sim" or "handmade:NAME"
    ("cell", "int", False),  # grid cell (nodes x rounds x proposals x faults_per_run), -1 for hand-made
    ("seed", "long", False),
    ("nodes", "int", False),
    ("rounds", "long", False),
    ("proposals", "long", False),
    ("faults_per_run", "int", False),  # requested; the generator may place fewer
    ("fault_events", "int", False),  # events actually in the schedule
    ("fault_rate", "double", False),  # events per 1000 ticks
    ("faults", "string", False),  # section 12 SPEC ("" for none)
    ("command", "string", False),  # replays this scenario
    ("digest", "string", True),
    ("ok", "boolean", False),  # no violation and no error
    ("violation_kind", "string", True),
    ("violation_tick", "long", True),
    ("violation_node", "int", True),
    ("violation_detail", "string", True),
    ("reproducer", "string", True),  # set when not ok
    ("error", "string", True),  # an exception escaped the simulator (a bug, reported like a violation)
    ("committed", "long", False),
    ("elections", "int", False),
    ("first_leader_tick", "long", True),  # null: no leader was ever established
    ("commit_latency_p50", "long", True),  # ticks; null: nothing committed
    ("commit_latency_p99", "long", True),
    ("messages_sent", "long", False),
    ("messages_dropped", "long", False),
    ("deliveries", "long", False),
    ("ticks_visited", "long", False),
    # the pipeline variant's streamed SNAPs (0 elsewhere): sent, in flight when their
    # sender crashed, their receiver crashed or a cut broke their link; installs, and
    # installs a crash came before
    ("snap_transfers", "long", False),
    ("snaps_cut_sender", "long", False),
    ("snaps_cut_receiver", "long", False),
    ("snaps_cut_link", "long", False),
    ("installs", "long", False),
    ("installs_cut", "long", False),
    # ... and the SNAPs due more than the election timeout after they were sent, and
    # those of them installed with no election at either end meanwhile (sync_progress)
    ("snaps_long", "long", False),
    ("snaps_long_installed", "long", False),
)
STREAM_COLUMNS = ("snap_transfers", "snaps_cut_sender", "snaps_cut_receiver", "snaps_cut_link", "installs",
                  "installs_cut", "snaps_long", "snaps_long_installed")
COLUMN_NAMES = tuple(c[0] for c in COLUMNS)


def spark_ddl() -> str:
    return ", ".join(f"`{name}` {typ}" + ("" if nullable else " not null") for name, typ, nullable in COLUMNS)


def arrow_schema() -> Any:
    import pyarrow as pa

    types = {
        "long": pa.int64(),
        "int": pa.int32(),
        "double": pa.float64(),
        "string": pa.string(),
        "boolean": pa.bool_(),
    }
    return pa.schema([pa.field(name, types[typ], nullable) for name, typ, nullable in COLUMNS])


def scenario_config(grid: Grid, index: int) -> tuple[int, SimConfig, int]:
    """(cell, config, requested faults) of simulator scenario ``index``."""
    c, cell = grid.cell_of(index)
    seed = grid.scenario_seed(index)
    options, pipeline = variant_options(grid.variant)
    draw = pipeline_faults if pipeline else random_faults  # the former adds power losses
    faults = tuple(draw(seed, cell.nodes, cell.rounds, cell.faults_per_run))
    spares = 0
    if grid.changes_per_run:
        # some nodes start outside the ensemble, so that adds have someone to add
        spares = (seed >> 16) % cell.nodes
        changes = random_changes(seed, cell.nodes, cell.rounds, grid.changes_per_run)
        faults = tuple(sorted((*faults, *changes), key=lambda e: e.start if isinstance(e, Cut) else e.at))
    config = SimConfig(seed, cell.nodes, cell.rounds, cell.proposals, faults=faults, options=options,
                       workload=grid.workload, spares=spares, pipeline=pipeline, plant=grid.plant)
    return c, config, cell.faults_per_run


def _none_if_negative(v: int) -> int | None:
    return v if v >= 0 else None


def run_index(grid: Grid, index: int) -> dict[str, Any]:
    """One row. Never raises for a scenario's own failure: that is data."""
    if index >= grid.scenarios:
        return _handmade_row(grid, index)
    c, config, requested = scenario_config(grid, index)
    row: dict[str, Any] = {
        "sweep_seed": grid.seed,
        "index": index,
        "kind": "sim",
        "cell": c,
        "seed": config.seed,
        "nodes": config.nodes,
        "rounds": config.rounds,
        "proposals": config.proposals,
        "faults_per_run": requested,
        "fault_events": len(config.faults),
        "fault_rate": len(config.faults) * 1000.0 / config.rounds,
        "faults": format_faults(list(config.faults)),
        "command": config.command() + " --check",
    }
    try:
        r = run_scenario(config, check=True)
    except Exception as exc:  # a crash in the simulator is a finding, not a reason to lose the sweep
        row.update(_empty_metrics())
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}", reproducer=row["command"])
        return row
    row.update(_outcome_fields(r.digest, r.violation, r.reproducer))
    row.update(
        committed=r.committed,
        elections=r.elections,
        first_leader_tick=_none_if_negative(r.first_leader_tick),
        commit_latency_p50=_none_if_negative(r.commit_latency_p50),
        commit_latency_p99=_none_if_negative(r.commit_latency_p99),
        messages_sent=r.messages_sent,
        messages_dropped=r.messages_dropped,
        deliveries=r.deliveries,
        ticks_visited=r.ticks_visited,
        **{name: getattr(r, name) for name in STREAM_COLUMNS},
    )
    return row


def _empty_metrics() -> dict[str, Any]:
    return {
        "digest": None,
        "violation_kind": None,
        "violation_tick": None,
        "violation_node": None,
        "violation_detail": None,
        "committed": 0,
        "elections": 0,
        "first_leader_tick": None,
        "commit_latency_p50": None,
        "commit_latency_p99": None,
        "messages_sent": 0,
        "messages_dropped": 0,
        "deliveries": 0,
        "ticks_visited": 0,
        **dict.fromkeys(STREAM_COLUMNS, 0),
    }


def _handmade_row(grid: Grid, index: int) -> dict[str, Any]:
    name = grid.canaries[index - grid.scenarios]
    h = HANDMADE[name]
    row: dict[str, Any] = {
        "sweep_seed": grid.seed,
        "index": index,
        "kind": f"handmade:{name}",
        "cell": -1,
        "seed": 0,
        "nodes": h.nodes,
        "rounds": 0,
        "proposals": 0,
        "faults_per_run": 0,
        "fault_events": 0,
        "fault_rate": 0.0,
        "faults": "",
        "command": h.command,
        **_empty_metrics(),
    }
    try:
        r = run_handmade(name)
    except Exception as exc:
        row.update(ok=False, error=f"{type(exc).__name__}: {exc}", reproducer=h.command)
        return row
    row.update(_outcome_fields(r.digest, r.violation, r.violation.reproducer if r.violation else ""))
    row.update(
        committed=r.committed,
        elections=r.elections,
    )
    return row


def run_task(grid: Grid, task: Task) -> dict[str, list[Any]]:
    """Rows of ``task.lo .. task.hi`` as columns (what Arrow wants)."""
    cols: dict[str, list[Any]] = {name: [] for name in COLUMN_NAMES}
    for index in range(task.lo, task.hi):
        row = run_index(grid, index)
        for name in COLUMN_NAMES:
            cols[name].append(row[name])
    return cols


def run_task_batches(grid: Grid, task: Task, batch_rows: int = 2000) -> Iterator[Any]:
    """Arrow record batches of a task, ``batch_rows`` at a time (bounded executor memory)."""
    import pyarrow as pa

    schema = arrow_schema()
    for lo in range(task.lo, task.hi, batch_rows):
        cols = run_task(grid, Task(task.task_id, lo, min(task.hi, lo + batch_rows)))
        yield pa.RecordBatch.from_pydict(cols, schema=schema)


def _outcome_fields(digest: str, v: Violation | None, reproducer: str) -> dict[str, Any]:
    """The columns every row shares: digest, verdict, and the first violation."""
    return {
        "digest": digest,
        "ok": v is None,
        "violation_kind": v.kind if v else None,
        "violation_tick": v.tick if v else None,
        "violation_node": v.node if v else None,
        "violation_detail": v.detail if v else None,
        "reproducer": reproducer if v else None,
        "error": None,
    }
