"""``zabd pipeline sweep``: a scenario grid on Spark, one Parquet row per scenario.

The job is one stage: ``spark.range(ntasks)`` with one task id per partition,
``mapInArrow`` runs each task's contiguous range of scenario indices
(:func:`zabd.pipeline.scenarios.run_task_batches`) and the rows go straight to
Parquet. Everything after that (summary, violations, plot quantiles) is
aggregated by Spark from the Parquet files, so the driver only ever holds
small results, whatever the sweep's size.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from zabd.pipeline.grid import Grid, Task, plan_tasks
from zabd.pipeline.scenarios import STREAM_COLUMNS, run_task_batches, spark_ddl

SCENARIOS_DIR = "scenarios.parquet"
BOX_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
MAX_LISTED_VIOLATIONS = 50


@dataclass(slots=True)
class SweepReport:
    out_dir: str
    scenarios: int
    tasks: int
    seconds: float  # the Spark job that ran the scenarios and wrote Parquet
    cells: list[dict[str, Any]]  # per (nodes, faults_per_run) summary rows, sorted
    failures: int  # rows with a violation or an error
    failed_rows: list[dict[str, Any]]  # the first MAX_LISTED_VIOLATIONS, by index
    plots: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failures == 0

    @property
    def streams(self) -> dict[str, int]:
        """The pipeline variant's streamed SNAPs and installs, summed over the grid's scenarios."""
        return {name: sum(c.get(name) or 0 for c in self.cells) for name in STREAM_COLUMNS}


def _task_mapper(grid: Grid, task_size: int) -> Any:
    """The executor side: task id -> its index range. The closure is O(1) in the
    number of tasks (a 100M-scenario sweep ships the grid and one integer)."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for task_id in batch.column(0).to_pylist():
                lo = task_id * task_size
                yield from run_task_batches(grid, Task(task_id, lo, min(grid.total, lo + task_size)))

    return run


def run_sweep_job(
    spark: Any, grid: Grid, path: str, task_size: int | None = None, progress: bool = True
) -> tuple[int, float]:
    """Run every scenario and write the Parquet rows to ``path``. Returns (tasks, seconds)."""
    from zabd.pipeline.session import Progress

    sc = spark.sparkContext
    tasks = plan_tasks(grid.total, sc.defaultParallelism, task_size)
    if not tasks:
        raise ValueError("the grid has no scenarios")
    ids = spark.range(0, len(tasks), 1, numPartitions=len(tasks))
    rows = ids.mapInArrow(_task_mapper(grid, tasks[0].hi - tasks[0].lo), spark_ddl())
    sc.setJobDescription(f"zabd sweep: {grid.total} scenarios in {len(tasks)} tasks")
    t0 = time.perf_counter()
    if progress:
        with Progress(spark, "sweep", grid.total, "scenarios"):
            rows.write.mode("overwrite").parquet(path)
    else:
        rows.write.mode("overwrite").parquet(path)
    return len(tasks), time.perf_counter() - t0


def summarize(spark: Any, path: str) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]], list[dict[str, Any]]]:
    """(cells, failures, first failed rows, plot quantiles) from the Parquet rows: two small Spark jobs."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(path)

    def q(col: str, qs: tuple[float, ...]) -> Any:
        return F.percentile_approx(col, list(qs), 10_000)

    # One pass for the table and the plots; hand-made rows form their own group (sim = false).
    groups = (
        df.groupBy((F.col("kind") == "sim").alias("sim"), "nodes", "faults_per_run")
        .agg(
            F.count("*").alias("scenarios"),
            F.sum(F.when(~F.col("ok"), 1).otherwise(0)).alias("failures"),
            F.avg("fault_rate").alias("fault_rate"),
            F.avg("committed").alias("committed_mean"),
            F.avg("elections").alias("elections_mean"),
            F.sum(F.when(F.col("first_leader_tick").isNull(), 1).otherwise(0)).alias("no_leader"),
            F.avg("messages_sent").alias("sent_mean"),
            F.avg("messages_dropped").alias("dropped_mean"),
            F.sum("messages_sent").alias("sent_sum"),
            F.sum("messages_dropped").alias("dropped_sum"),
            q("first_leader_tick", (*BOX_QUANTILES, 0.99)).alias("first_leader_q"),
            q("commit_latency_p50", BOX_QUANTILES).alias("latency_p50"),
            q("commit_latency_p99", (*BOX_QUANTILES, 0.99)).alias("latency_p99_q"),
            q("elections", BOX_QUANTILES).alias("elections"),
            *(F.sum(name).alias(name) for name in STREAM_COLUMNS),
        )
        .orderBy("nodes", "faults_per_run")
        .collect()
    )
    cell_rows: list[dict[str, Any]] = []
    dist: list[dict[str, Any]] = []
    failures = 0
    for r in groups:
        d = r.asDict()
        failures += d["failures"]
        if not d.pop("sim"):
            continue
        fl = d.pop("first_leader_q") or [None] * 6
        l50 = d.pop("latency_p50") or [None] * 5
        l99 = d.pop("latency_p99_q") or [None] * 6
        el = d.pop("elections")
        sent, dropped = d.pop("sent_sum") or 0, d.pop("dropped_sum") or 0
        dist.append(
            {
                "nodes": d["nodes"],
                "faults_per_run": d["faults_per_run"],
                "latency_p50": l50,
                "latency_p99": l99[:5],
                "first_leader_tick": fl[:5],
                "elections": el,
            }
        )
        d.update(
            first_leader_p50=fl[2],
            first_leader_p99=fl[5],
            latency_p50_median=l50[2],
            latency_p99_median=l99[2],
            latency_p99_p99=l99[5],
            drop_pct=100.0 * dropped / (sent + dropped) if sent + dropped else 0.0,
        )
        cell_rows.append(d)
    failed_rows: list[dict[str, Any]] = []
    if failures:
        failed_rows = [
            r.asDict()
            for r in df.where(~F.col("ok"))
            .select(
                "index",
                "kind",
                "nodes",
                "violation_kind",
                "violation_tick",
                "violation_node",
                "violation_detail",
                "error",
                "reproducer",
            )
            .orderBy("index")
            .limit(MAX_LISTED_VIOLATIONS)
            .collect()
        ]
    return cell_rows, failures, failed_rows, dist


def sweep(
    spark: Any, grid: Grid, out_dir: str, task_size: int | None = None, progress: bool = True, plots: bool = True
) -> SweepReport:
    from zabd.pipeline.report import format_streams, format_table, write_plots

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, SCENARIOS_DIR)
    ntasks, seconds = run_sweep_job(spark, grid, path, task_size, progress)
    cells, failures, failed_rows, dist = summarize(spark, path)
    report = SweepReport(out_dir, grid.total, ntasks, seconds, cells, failures, failed_rows)
    if plots:
        report.plots = write_plots(dist, out_dir)
    with open(os.path.join(out_dir, "summary.txt"), "w") as fh:
        fh.write(format_table(cells) + "\n")
        if grid.variant == "pipeline":
            fh.write(format_streams(report.streams) + "\n")
    with open(os.path.join(out_dir, "sweep.json"), "w") as fh:
        json.dump(
            {
                "grid": grid.to_dict(),
                "command": grid.command(),
                "tasks": ntasks,
                "seconds": round(seconds, 3),
                "scenarios_per_second": round(grid.total / seconds, 1) if seconds > 0 else None,
                "failures": failures,
                "streams": report.streams,
                "cells": cells,
                "failed": failed_rows,
                "plots": report.plots,
            },
            fh,
            indent=2,
            default=str,
        )
        fh.write("\n")
    return report
