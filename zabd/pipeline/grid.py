"""The scenario grid of a sweep: what to run, derived only from the grid.

No Spark here: the grid is a small frozen value that is pickled to every
executor, and every scenario is a pure function of ``(grid, index)``, so the
same sweep always produces the same rows wherever (and in whatever task) each
index runs.

Index layout: ``0 .. scenarios-1`` are simulator runs, one grid *cell*
(nodes x rounds x proposals x faults-per-run) after another, round-robin, so
every contiguous task range covers the cells evenly; the next
``len(canaries)`` indices are hand-made checker inputs
(:mod:`zabd.pipeline.handmade`), there so a sweep can prove end to end that
it reports violations.
"""

from __future__ import annotations

import functools
import itertools
import math
import tomllib
from dataclasses import dataclass

from zabd.protocol.rand import mix

INT63_MAX = (1 << 63) - 1  # Parquet/Spark longs are signed
MAX_FAULTS_PER_RUN = 10_000
# A task runs at most this many scenarios; enough to amortise a task's fixed
# cost (tens of ms) over seconds of simulation, small enough for retries.
MAX_TASK_SIZE = 10_000
TASKS_PER_CORE = 4  # a few waves per core, so a slow task does not leave a core idle for long


class GridError(ValueError):
    """A bad grid parameter: one line naming the field, value and expectation."""


@dataclass(frozen=True, slots=True)
class Cell:
    nodes: int
    rounds: int
    proposals: int
    faults_per_run: int


@functools.lru_cache(maxsize=64)
def _cells(
    nodes: tuple[int, ...], rounds: tuple[int, ...], proposals: tuple[int, ...], faults: tuple[int, ...]
) -> tuple[Cell, ...]:
    # cached: every scenario index looks its cell up
    return tuple(Cell(n, r, k, f) for n, r, k, f in itertools.product(nodes, rounds, proposals, faults))


@dataclass(frozen=True, slots=True)
class Grid:
    scenarios: int
    seed: int
    nodes: tuple[int, ...]
    rounds: tuple[int, ...]
    proposals: tuple[int, ...]
    faults_per_run: tuple[int, ...]
    canaries: tuple[str, ...] = ()
    # "server": the server's protocol variant (windowed, sync plans); "pipeline": that
    # variant through the server's EffectPipeline over disks that lose unflushed
    # writes, with power losses among the faults (zabd.sim.pipes); neither canonical
    variant: str = "canonical"
    # "zk": ZooKeeper requests and a tree per node (zabd.sim.zk_workload); not canonical
    workload: str = "raw"
    # membership changes asked of the leader per scenario (zabd.sim.faults.random_changes),
    # with 0..nodes-1 nodes starting outside the ensemble; not canonical
    changes_per_run: int = 0
    # a bug planted in the pipeline variant (zabd.sim.pipes.PLANTS): the sweep must report it
    plant: str = ""

    @property
    def cells(self) -> tuple[Cell, ...]:
        return _cells(self.nodes, self.rounds, self.proposals, self.faults_per_run)

    @property
    def total(self) -> int:
        return self.scenarios + len(self.canaries)

    def scenario_seed(self, index: int) -> int:
        """The simulator seed of scenario ``index``: mixed, so neighbours are unrelated runs."""
        return mix(mix(self.seed) ^ index) & INT63_MAX

    def cell_of(self, index: int) -> tuple[int, Cell]:
        cells = self.cells
        c = index % len(cells)
        return c, cells[c]

    def to_dict(self) -> dict[str, object]:
        return {
            "scenarios": self.scenarios,
            "seed": self.seed,
            "nodes": list(self.nodes),
            "rounds": list(self.rounds),
            "proposals": list(self.proposals),
            "faults_per_run": list(self.faults_per_run),
            "canaries": list(self.canaries),
            "variant": self.variant,
            "workload": self.workload,
            "changes_per_run": self.changes_per_run,
            "plant": self.plant,
        }

    def command(self) -> str:
        """The ``zabd pipeline sweep`` flags that rebuild this grid (canaries need --grid)."""

        def csv(values: tuple[int, ...]) -> str:
            return ",".join(str(v) for v in values)

        return (
            f"zabd pipeline sweep --scenarios {self.scenarios} --seed {self.seed} --nodes {csv(self.nodes)} "
            f"--rounds {csv(self.rounds)} --proposals {csv(self.proposals)} "
            f"--faults-per-run {csv(self.faults_per_run)}"
            + (f" --variant {self.variant}" if self.variant != "canonical" else "")
            + (f" --workload {self.workload}" if self.workload != "raw" else "")
            + (f" --changes-per-run {self.changes_per_run}" if self.changes_per_run else "")
            + (f" --plant {self.plant}" if self.plant else "")
        )


@dataclass(frozen=True, slots=True)
class Task:
    """A contiguous range of scenario indices run by one Spark task (or pool job)."""

    task_id: int
    lo: int
    hi: int  # exclusive


def plan_tasks(total: int, parallelism: int, task_size: int | None = None) -> list[Task]:
    """Split ``0..total`` into contiguous ranges.

    Default: ``TASKS_PER_CORE`` tasks per core, but never more than
    ``MAX_TASK_SIZE`` scenarios in one task, so a large sweep is thousands of
    scenarios per task rather than one task per scenario.
    """
    if total <= 0:
        return []
    if task_size is None:
        ntasks = max(parallelism * TASKS_PER_CORE, math.ceil(total / MAX_TASK_SIZE))
        task_size = max(1, math.ceil(total / ntasks))
    ntasks = math.ceil(total / task_size)
    return [Task(i, i * task_size, min(total, (i + 1) * task_size)) for i in range(ntasks)]


# ---------------------------------------------------------------- validation


def _int(field: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise GridError(f"{field}: {value!r} is not an integer (expected {lo}..={hi})")
    if not lo <= value <= hi:
        raise GridError(f"{field}: {value} is outside {lo}..={hi}")
    return value


def _int_list(field: str, value: object, lo: int, hi: int) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not items:
        raise GridError(f"{field}: empty list (expected at least one value in {lo}..={hi})")
    out = tuple(_int(field, v, lo, hi) for v in items)
    if len(set(out)) != len(out):
        raise GridError(f"{field}: {value!r} lists a value twice")
    return out


def parse_int_csv(field: str, text: str, lo: int, hi: int) -> tuple[int, ...]:
    """``3,5,7`` -> (3, 5, 7): plain decimals, as ``zabd sim`` takes them."""
    values: list[int] = []
    for part in text.split(","):
        if not part.isascii() or not part.isdigit():
            raise GridError(f"{field}: {text!r} is not a comma-separated list of plain decimals")
        values.append(int(part))
    return _int_list(field, values, lo, hi)


def check_canaries(field: str, value: object) -> tuple[str, ...]:
    from zabd.pipeline.handmade import HANDMADE

    items = value if isinstance(value, list) else [value]
    out: list[str] = []
    for v in items:
        if not isinstance(v, str) or v not in HANDMADE:
            raise GridError(f"{field}: {v!r} is not a hand-made history (expected one of {', '.join(HANDMADE)})")
        out.append(v)
    return tuple(out)


GRID_KEYS = (
    "scenarios", "seed", "nodes", "rounds", "proposals", "faults_per_run", "canaries", "variant", "workload",
    "changes_per_run", "plant", "task_size", "out",
)
DEFAULTS: dict[str, object] = {
    "seed": 0,
    "nodes": [3, 5, 7],
    "rounds": [2000],
    "proposals": [20],
    "faults_per_run": [4],
}
U64_MAX = (1 << 64) - 1


def make_grid(values: dict[str, object], where: str = "") -> Grid:
    """Build a grid from TOML-shaped values (lists or scalars). ``where`` prefixes field names."""
    merged = {**DEFAULTS, **values}
    if "scenarios" not in merged:
        raise GridError(f"{where}scenarios: missing (expected the number of scenarios, 1..={INT63_MAX})")
    if merged.get("variant") == "pipeline" and merged.get("workload", "raw") != "raw":
        raise GridError(f"{where}workload: {merged['workload']!r} with variant 'pipeline' (it runs raw payloads only)")
    return Grid(
        scenarios=_int(f"{where}scenarios", merged["scenarios"], 0, INT63_MAX),
        seed=_int(f"{where}seed", merged["seed"], 0, INT63_MAX),
        nodes=_int_list(f"{where}nodes", merged["nodes"], 1, 255),
        rounds=_int_list(f"{where}rounds", merged["rounds"], 1, U64_MAX),
        proposals=_int_list(f"{where}proposals", merged["proposals"], 0, U64_MAX),
        faults_per_run=_int_list(f"{where}faults_per_run", merged["faults_per_run"], 0, MAX_FAULTS_PER_RUN),
        canaries=check_canaries(f"{where}canaries", merged.get("canaries", [])),
        variant=check_variant(f"{where}variant", merged.get("variant", "canonical")),
        workload=check_workload(f"{where}workload", merged.get("workload", "raw")),
        changes_per_run=_int(f"{where}changes_per_run", merged.get("changes_per_run", 0), 0, MAX_FAULTS_PER_RUN),
        plant=check_plant(f"{where}plant", merged.get("plant", ""), merged.get("variant", "canonical")),
    )


def check_variant(field: str, value: object) -> str:
    from zabd.sim.simulator import SIM_VARIANTS

    if not isinstance(value, str) or value not in SIM_VARIANTS:
        raise GridError(f"{field}: {value!r} is not a protocol variant (expected one of {', '.join(SIM_VARIANTS)})")
    return value


def check_plant(field: str, value: object, variant: object) -> str:
    from zabd.sim.pipes import PLANTS

    if value == "":
        return ""
    if not isinstance(value, str) or value not in PLANTS:
        raise GridError(f"{field}: {value!r} is not a bug to plant (expected one of {', '.join(PLANTS)})")
    if variant != "pipeline":
        raise GridError(f"{field}: {value} is planted in the pipeline variant only (variant is {variant!r})")
    return value


def check_workload(field: str, value: object) -> str:
    from zabd.sim.simulator import WORKLOADS

    if not isinstance(value, str) or value not in WORKLOADS:
        raise GridError(f"{field}: {value!r} is not a workload (expected one of {', '.join(WORKLOADS)})")
    return value


def load_grid_file(path: str) -> tuple[Grid, dict[str, object]]:
    """Read a TOML grid. Returns the grid and the other recognised keys (task_size, out)."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise GridError(f"--grid: cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise GridError(f"--grid: {path} is not valid TOML: {exc}") from None
    for key in data:
        if key not in GRID_KEYS:
            raise GridError(f"{path}: unknown key {key!r} (expected one of {', '.join(GRID_KEYS)})")
    extra: dict[str, object] = {}
    if "task_size" in data:
        extra["task_size"] = _int(f"{path}: task_size", data.pop("task_size"), 1, INT63_MAX)
    if "out" in data:
        out = data.pop("out")
        if not isinstance(out, str) or not out:
            raise GridError(f"{path}: out: {out!r} is not a directory path")
        extra["out"] = out
    return make_grid(data, f"{path}: "), extra
