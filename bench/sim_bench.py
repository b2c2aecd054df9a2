"""Simulator speed: runs/s and simulated events/s for a fixed mix of configurations.

    python3 bench/sim_bench.py [--repeat N]

Reports CPU time (time.process_time) per configuration: the best of N runs,
so that another process on the machine inflates the figure as little as
possible. 'events' are message deliveries plus node ticks that did work.
"""

from __future__ import annotations

import argparse
import platform
import time

from zabd.sim import SimConfig, Simulator, parse_faults
from zabd.sim.run import run_scenario

MIX = [
    ("headline", SimConfig(42, 5, 100_000, 2000)),
    ("3 nodes", SimConfig(1, 3, 20_000, 400)),
    ("7 nodes", SimConfig(99, 7, 20_000, 400)),
    (
        "5 nodes, faults",
        SimConfig(17, 5, 20_000, 400, faults=tuple(parse_faults(
            "crash:5@500,restart:5@2000,crash:4@2500,restart:4@3200,cut:1-2@5000-7000,cut:3>1@9000-9100", 5))),
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.repeat} runs each, best CPU time")
    print(f"{'configuration':<18} {'cpu s':>8} {'runs/s':>8} {'deliveries':>11} {'events/s':>11} {'+check s':>9}")
    for name, cfg in MIX:
        best = float("inf")
        sim = None
        for _ in range(args.repeat):
            t0 = time.process_time()
            sim = Simulator(cfg)
            sim.run()
            best = min(best, time.process_time() - t0)
        assert sim is not None
        checked = float("inf")
        for _ in range(max(1, args.repeat // 2)):
            t0 = time.process_time()
            run_scenario(cfg, check=True)
            checked = min(checked, time.process_time() - t0)
        events = sim.stats.deliveries + sim.stats.ticks_visited
        print(f"{name:<18} {best:8.4f} {1 / best:8.1f} {sim.stats.deliveries:11d} {events / best:11.0f} {checked:9.4f}")


if __name__ == "__main__":
    main()
