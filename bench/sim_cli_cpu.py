"""Issue 20's measure: CPU of the whole ``zabd sim`` command, less the
interpreter's start, for one or two source trees, interleaved.

    python3 bench/sim_cli_cpu.py [--old /tmp/zabd_old] [--new .] [--runs 15]
        [--args "--seed 42 --nodes 5 --rounds 100000 --proposals 2000"]

Each run is a fresh process; its CPU (user + system, from ``wait4``) is
taken, and the best of ``--runs`` is reported, less the best CPU of
``python -c "import zabd"`` from the same tree: best-of because another
process on the machine can only add to a figure. Also the in-process loop
(``Simulator(cfg).run()``), best CPU of as many runs; and a sweep's
scenarios per CPU-second (``zabd.pipeline.scenarios.run_task``, what a Spark
task runs, in one process) over the grid below, ``--sweep N`` scenarios.
Old and new take turns so a noisy spell hurts both.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

LOOP = """
import sys, time
from zabd.sim import SimConfig, Simulator
cfg = SimConfig({seed}, {nodes}, {rounds}, {proposals})
best = 1e9
for _ in range({runs}):
    t0 = time.process_time(); Simulator(cfg).run(); best = min(best, time.process_time() - t0)
print(best)
"""

# the sweep's default grid (zabd pipeline sweep): every scenario safety-checked
SWEEP = """
import time
from zabd.pipeline.grid import Task, make_grid
from zabd.pipeline.scenarios import run_task
grid = make_grid({{"scenarios": {n}, "seed": 2026, "nodes": [3, 5, 7], "rounds": [2000, 5000], "proposals": [20, 100],
                  "faults_per_run": [0, 4, 8], "variant": "{variant}"}})
t0 = time.process_time(); rows = run_task(grid, Task(0, 0, {n}))
print({n} / (time.process_time() - t0))
"""


def cpu_of(argv: list[str], tree: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    proc = subprocess.Popen(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        raise SystemExit(f"sim_cli_cpu: {' '.join(argv)} in {tree}: exit status {status}")
    return usage.ru_utime + usage.ru_stime


def loop_cpu(tree: Path, args: dict[str, int], runs: int) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    out = subprocess.run([sys.executable, "-c", LOOP.format(runs=runs, **args)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def sweep_rate(tree: Path, n: int, variant: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree.resolve()))
    out = subprocess.run([sys.executable, "-c", SWEEP.format(n=n, variant=variant)], env=env, cwd=tree,
                         capture_output=True, text=True, check=True)
    return float(out.stdout.strip())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path)
    p.add_argument("--new", type=Path, default=Path("."))
    p.add_argument("--runs", type=int, default=15)
    p.add_argument("--args", default="--seed 42 --nodes 5 --rounds 100000 --proposals 2000")
    p.add_argument("--sweep", type=int, default=0, help="also a sweep of this many scenarios per tree and variant")
    a = p.parse_args()
    words = shlex.split(a.args)
    sim_args = {k.lstrip("-"): int(v) for k, v in zip(words[::2], words[1::2], strict=True)}
    trees = {"new": a.new} if a.old is None else {"old": a.old, "new": a.new}
    best: dict[str, dict[str, float]] = {name: {"cmd": 1e9, "import": 1e9} for name in trees}
    for _ in range(a.runs):
        for name, tree in trees.items():
            b = best[name]
            b["cmd"] = min(b["cmd"], cpu_of([sys.executable, "-m", "zabd", "sim", *words], tree))
            b["import"] = min(b["import"], cpu_of([sys.executable, "-c", "import zabd"], tree))
    for name, tree in trees.items():
        best[name]["loop"] = loop_cpu(tree, sim_args, a.runs)
    print(f"zabd sim {a.args}: best of {a.runs} runs, CPU ms")
    print(f"{'tree':<5} {'command':>8} {'start':>6} {'command - start':>16} {'loop':>7}")
    for name, b in best.items():
        print(f"{name:<5} {b['cmd'] * 1e3:8.1f} {b['import'] * 1e3:6.1f} {(b['cmd'] - b['import']) * 1e3:16.1f} "
              f"{b['loop'] * 1e3:7.1f}")
    if "old" in best:
        o, n = best["old"], best["new"]
        print(f"new/old: command - start {(n['cmd'] - n['import']) / (o['cmd'] - o['import']):.2f}x, "
              f"loop {n['loop'] / o['loop']:.2f}x")
    if a.sweep:
        print(f"sweep of {a.sweep} scenarios (default grid), scenarios per CPU-second, alternating trees:")
        for variant in ("canonical", "server"):
            rates = {name: [sweep_rate(tree, a.sweep, variant) for _ in range(1)] for name, tree in trees.items()}
            rates = {name: [*rates[name], sweep_rate(tree, a.sweep, variant)] for name, tree in trees.items()}
            line = ", ".join(f"{name} {max(r):.0f}" for name, r in rates.items())
            ratio = f"; new/old {max(rates['new']) / max(rates['old']):.2f}x" if "old" in rates else ""
            print(f"  {variant}: {line}{ratio}")


if __name__ == "__main__":
    main()
