"""Spark sweep vs multiprocessing.Pool on the same grid, in the same run.

    python3 bench/pipeline_bench.py [--scenarios 10000] [--cores 2] [--repeat 2] [--out DIR]

Both engines run the same function (zabd.pipeline.scenarios.run_task) over the
same task split (zabd.pipeline.grid.plan_tasks) and end with the same Parquet
rows on disk:

* pool:  multiprocessing.Pool(cores) -> imap_unordered over the tasks ->
         pyarrow table -> one Parquet file. Timed from creating the pool
         (fork start-up included) to the file being written.
* spark: local[cores], the sweep's own job (run_sweep_job: mapInArrow ->
         Parquet), on a session that is already up. The session's start-up
         (JVM, first Python workers) is reported separately, once.

Runs alternate (pool, spark, pool, spark, ...) so that load from other
processes on the machine hits both alike; the table shows every run and the
best and median of each engine. Overhead = spark / pool - 1 on the medians.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from zabd.pipeline.grid import Grid, Task, make_grid, plan_tasks
from zabd.pipeline.scenarios import COLUMN_NAMES, arrow_schema, run_task

GRID: dict[str, object] = {
    "seed": 2026,
    "nodes": [3, 5, 7],
    "rounds": [2000],
    "proposals": [20],
    "faults_per_run": [0, 4],
}

_grid: Grid | None = None
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu() -> float:
    """CPU seconds of this process, its reaped children, and every live descendant with
    theirs (the JVM, Spark's Python worker daemon and workers). Linux /proc only.

    Wall time on a shared 2-core machine moves with other people's load; CPU time spent
    per scenario much less, so both are reported.
    """
    me = os.getpid()
    parent: dict[int, int] = {}
    times: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        pid = int(entry)
        parent[pid] = int(fields[1])
        times[pid] = sum(int(f) for f in fields[11:15]) / _TICK  # utime stime cutime cstime
    total = 0.0
    for pid in times:
        p = pid
        while p > 1 and p != me:
            p = parent.get(p, 1)
        if p == me:
            total += times[pid]
    return total


def _init(grid: Grid) -> None:
    global _grid
    _grid = grid


def _pool_task(task: Task) -> dict[str, list[Any]]:
    assert _grid is not None
    return run_task(_grid, task)


def run_pool(grid: Grid, tasks: list[Task], cores: int, path: str) -> float:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    with multiprocessing.get_context("fork").Pool(cores, initializer=_init, initargs=(grid,)) as pool:
        parts = list(pool.imap_unordered(_pool_task, tasks))
    cols: dict[str, list[Any]] = {name: [] for name in COLUMN_NAMES}
    for part in parts:
        for name in COLUMN_NAMES:
            cols[name].extend(part[name])
    pq.write_table(pa.Table.from_pydict(cols, schema=arrow_schema()), path)
    return time.perf_counter() - t0


def parquet_bytes(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".parquet"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenarios", type=int, default=10_000)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default=None, help="scratch directory (default: a temp dir, removed)")
    args = parser.parse_args()

    grid = make_grid({"scenarios": args.scenarios, **GRID})
    tasks = plan_tasks(grid.total, args.cores)
    out = args.out or tempfile.mkdtemp(prefix="zabd-pipeline-bench-")
    os.makedirs(out, exist_ok=True)
    print(
        f"python {platform.python_version()}, {os.cpu_count()} CPUs visible, {args.cores} cores used; "
        f"grid: {grid.command()}; {len(tasks)} tasks of ~{tasks[0].hi - tasks[0].lo} scenarios",
        flush=True,
    )

    from pyspark import __version__ as spark_version

    from zabd.pipeline.session import get_session
    from zabd.pipeline.sweep import run_sweep_job

    t0 = time.perf_counter()
    spark = get_session(f"local[{args.cores}]", app_name="zabd-pipeline-bench")
    # The first Arrow job starts the Python workers and their imports (pyarrow, zabd): a
    # one-off cost of a session, not of a sweep, so it is timed with the start-up.
    warm = make_grid({"scenarios": 4 * args.cores, **GRID})
    run_sweep_job(spark, warm, os.path.join(out, "warmup.parquet"), progress=False)
    startup = time.perf_counter() - t0
    print(f"spark {spark_version}: session + first workers up in {startup:.1f} s", flush=True)

    pool_s: list[float] = []
    spark_s: list[float] = []
    pool_cpu: list[float] = []
    spark_cpu: list[float] = []
    print(f"{'run':>4} {'engine':<6} {'wall s':>8} {'scen/s':>8} {'cpu s':>8} {'cpu ms/scen':>11}", flush=True)
    for r in range(args.repeat):
        c0 = tree_cpu()
        dt = run_pool(grid, tasks, args.cores, os.path.join(out, "pool.parquet"))
        cpu = tree_cpu() - c0
        pool_s.append(dt)
        pool_cpu.append(cpu)
        print(
            f"{r + 1:>4} {'pool':<6} {dt:>8.2f} {grid.total / dt:>8.0f} {cpu:>8.1f} {1000 * cpu / grid.total:>11.2f}",
            flush=True,
        )
        c0 = tree_cpu()
        ntasks, dt = run_sweep_job(spark, grid, os.path.join(out, "spark.parquet"), progress=False)
        cpu = tree_cpu() - c0
        assert ntasks == len(tasks)
        spark_s.append(dt)
        spark_cpu.append(cpu)
        print(
            f"{r + 1:>4} {'spark':<6} {dt:>8.2f} {grid.total / dt:>8.0f} {cpu:>8.1f} {1000 * cpu / grid.total:>11.2f}",
            flush=True,
        )

    # same rows from both engines
    import pyarrow.parquet as pq

    a = pq.read_table(os.path.join(out, "pool.parquet")).sort_by("index")
    b = pq.read_table(os.path.join(out, "spark.parquet")).sort_by("index")
    same = a.num_rows == b.num_rows == grid.total and a.column("digest").equals(b.column("digest"))

    pm, sm = statistics.median(pool_s), statistics.median(spark_s)
    result = {
        "scenarios": grid.total,
        "cores": args.cores,
        "tasks": len(tasks),
        "pool_seconds": pool_s,
        "spark_seconds": spark_s,
        "pool_median_s": round(pm, 3),
        "spark_median_s": round(sm, 3),
        "pool_scenarios_per_s": round(grid.total / pm, 1),
        "spark_scenarios_per_s": round(grid.total / sm, 1),
        "overhead_pct_median": round(100 * (sm / pm - 1), 1),
        "overhead_pct_best": round(100 * (min(spark_s) / min(pool_s) - 1), 1),
        "pool_cpu_s": [round(c, 2) for c in pool_cpu],
        "spark_cpu_s": [round(c, 2) for c in spark_cpu],
        "cpu_overhead_pct_median": round(100 * (statistics.median(spark_cpu) / statistics.median(pool_cpu) - 1), 1),
        "parquet_bytes_per_row": round(parquet_bytes(os.path.join(out, "spark.parquet")) / grid.total, 1),
        "spark_startup_s": round(startup, 2),
        "same_rows": same,
    }
    print(
        f"median: pool {pm:.2f} s ({grid.total / pm:.0f}/s), spark {sm:.2f} s ({grid.total / sm:.0f}/s): "
        f"Spark overhead {result['overhead_pct_median']:+.1f} % (best vs best {result['overhead_pct_best']:+.1f} %); "
        f"CPU overhead {result['cpu_overhead_pct_median']:+.1f} % (medians); "
        f"one-off session start-up {startup:.1f} s; identical rows: {same}"
    )
    print("json: " + json.dumps(result))
    spark.stop()
    if args.out is None:
        shutil.rmtree(out, ignore_errors=True)
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
