"""``zabd sim``: argument rules of spec section 1, exactly.

Options are ``--name value`` in any order; ``--name=value`` is an unknown
option; a value that begins with ``--`` is a missing value; numbers are plain
ASCII decimals. Usage errors: one line on stderr, nothing on stdout, exit 2.

Beyond the spec: ``--check`` runs the safety checker (exit 1 on a violation),
``--random-faults COUNT`` draws a seeded fault schedule and prints it on stderr
as ``faults: SPEC`` so the run replays with ``--faults SPEC``; ``--variant
server`` runs the protocol variant the server runs (``zabd.protocol.options``;
not canonical: its digests are not the spec's), and ``--variant pipeline``
runs it with every node's effects through the server's EffectPipeline over
a disk that flushes late and loses unflushed writes on a crash
(``zabd.sim.pipes``; ``--plant early-send`` plants a bug there for the checker
to catch); ``--workload zk`` proposes
ZooKeeper requests decided by the leader and applied to a tree on every node
(``zabd.sim.zk_workload``; not canonical either); ``--observers K`` makes the
last K nodes observers, members that never vote, and ``--spares S`` starts
the last S nodes outside the ensemble; ``add:N@T``, ``observe:N@T`` and
``remove:N@T`` in ``--faults`` ask the leader for membership changes, and
``--random-changes COUNT`` draws some from the seed (not canonical either).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from zabd.protocol.zxid import CounterOverflow
from zabd.sim.faults import (
    Cut,
    FaultEvent,
    FaultSpecError,
    format_faults,
    parse_faults,
    pipeline_faults,
    random_changes,
    random_faults,
)
from zabd.sim.pipes import PLANTS
from zabd.sim.simulator import SIM_VARIANTS, WORKLOADS, variant_options

if TYPE_CHECKING:
    from zabd.sim.checker import Violation
    from zabd.sim.simulator import SimConfig

U64_MAX = (1 << 64) - 1
_DECIMAL = re.compile(r"[0-9]+")
VALUE_OPTIONS = (
    "seed", "nodes", "rounds", "proposals", "partition", "faults", "dump", "random-faults", "variant", "workload",
    "observers", "spares", "random-changes", "plant",
)
FLAG_OPTIONS = ("check",)
REQUIRED = ("seed", "nodes", "rounds", "proposals")


class UsageError(Exception):
    pass


class HelpRequested(Exception):
    """``--help`` or ``-h`` where an option name goes: beyond the spec, where
    both were usage errors (an unknown option, an unexpected argument)."""


HELP = """usage: zabd sim --seed S --nodes N --rounds R --proposals K [--partition s,d,...] [--faults SPEC]
                [--dump FILE] [--check] [--random-faults COUNT] [--variant canonical|server|pipeline]
                [--workload raw|zk] [--observers K] [--spares S] [--random-changes COUNT] [--plant BUG]

Run the deterministic simulator (spec ../shared/spec/canonical-sim.md) and print the
SHA-256 digest of the canonical cluster dump (64 hex digits, no newline).

  --seed S              u64 seed of every random choice
  --nodes N             cluster size, 1..255
  --rounds R            ticks to simulate
  --proposals K         client proposals to submit
  --partition s,d,...   directed pairs s>d whose messages are dropped for the whole run
  --faults SPEC         comma-separated crash:N@T, restart:N@T, cut:S>D@T1-T2 (one way),
                        cut:S-D@T1-T2 (both ways); a shell needs the > form quoted
                        ('cut:1>2@5-9'), or write it cut:1to2@5-9 (the same cut)
  --dump FILE           write the canonical dump to FILE
  --check               run the safety checker after every handler; exit 1 on a violation
  --random-faults COUNT draw a fault schedule from the seed (printed on stderr as faults: SPEC)
  --variant NAME        canonical (default), server (the server's variant; not the spec's digests) or
                        pipeline (the server's variant, every node's effects through the server's
                        EffectPipeline over a disk that flushes 1..40 ticks late and loses unflushed
                        writes on a crash, SNAPs streamed over tens to hundreds of ticks and installed
                        by a slower flush; pipeline options drawn from the seed; not the spec's digests)
  --workload NAME       raw (default: zab-N payloads) or zk (ZooKeeper sessions, znodes, multi, ACLs,
                        expiry, a tree per node checked by --check; not the spec's digests)
  --observers K         the last K nodes are observers: they follow and hold every txn but never
                        vote or lead (0..N-1; not the spec's digests)
  --spares S            the last S nodes start outside the ensemble (not the spec's digests)
  --random-changes COUNT draw membership changes (add:N@T, observe:N@T, remove:N@T, as in
                        --faults) from the seed, printed on stderr as changes: SPEC
  --plant BUG           (--variant pipeline) plant a bug for --check to catch: early-send (a Send
                        leaves before the persist it follows is durable)

Options are --name value (not --name=value); numbers are plain decimals.
Usage errors: one line on stderr, nothing on stdout, exit 2."""


@dataclass(frozen=True, slots=True)
class SimArgs:
    seed: int
    nodes: int
    rounds: int
    proposals: int
    partition: frozenset[tuple[int, int]]
    faults: tuple[FaultEvent, ...]
    dump: str | None
    check: bool
    random_faults: int | None
    variant: str
    workload: str
    observers: int = 0
    spares: int = 0
    random_changes: int | None = None
    plant: str = ""


def plain_decimal(name: str, text: str, limit: int = U64_MAX) -> int:
    if not _DECIMAL.fullmatch(text):
        raise UsageError(f"--{name}: {text!r} is not a plain decimal number")
    value = int(text)
    if value > limit:
        raise UsageError(f"--{name}: {text} is out of range (at most {limit})")
    return value


def parse_partition(text: str, nodes: int) -> frozenset[tuple[int, int]]:
    if text == "":
        return frozenset()
    ids = [plain_decimal("partition", part) for part in text.split(",")]
    if len(ids) % 2:
        raise UsageError(f"--partition: {len(ids)} ids given; expected an even count (directed pairs s,d)")
    pairs = set()
    for s, d in zip(ids[::2], ids[1::2], strict=True):
        for x in (s, d):
            if not 1 <= x <= nodes:
                raise UsageError(f"--partition: node id {x} is outside 1..={nodes}")
        if s == d:
            raise UsageError(f"--partition: pair {s},{d} names the same node twice")
        pairs.add((s, d))
    return frozenset(pairs)


def parse_args(argv: list[str]) -> SimArgs:
    raw: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("--help", "-h"):
            raise HelpRequested
        if not token.startswith("--"):
            raise UsageError(f"unexpected argument {token!r}; options are --name value")
        name = token[2:]
        if name in FLAG_OPTIONS:
            if name in flags:
                raise UsageError(f"option {token} given twice")
            flags.add(name)
            i += 1
            continue
        if name not in VALUE_OPTIONS:
            raise UsageError(f"unknown option {token}")
        if name in raw:
            raise UsageError(f"option {token} given twice")
        if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
            raise UsageError(f"option {token} needs a value")
        raw[name] = argv[i + 1]
        i += 2
    for name in REQUIRED:
        if name not in raw:
            raise UsageError(f"missing option --{name}")
    seed = plain_decimal("seed", raw["seed"])
    nodes = plain_decimal("nodes", raw["nodes"])
    if not 1 <= nodes <= 255:
        raise UsageError(f"--nodes: {raw['nodes']} is outside 1..=255")
    rounds = plain_decimal("rounds", raw["rounds"])
    proposals = plain_decimal("proposals", raw["proposals"])
    partition = parse_partition(raw.get("partition", ""), nodes)
    faults: list[FaultEvent] = []
    if "faults" in raw:
        try:
            faults = parse_faults(raw["faults"], nodes)
        except FaultSpecError as exc:
            raise UsageError(f"--faults: {exc}") from None
    rf: int | None = None
    if "random-faults" in raw:
        if "faults" in raw:
            raise UsageError("--random-faults and --faults exclude each other")
        rf = plain_decimal("random-faults", raw["random-faults"], 10_000)
    variant = raw.get("variant", "canonical")
    if variant not in SIM_VARIANTS:
        raise UsageError(f"--variant: {variant!r} is not a variant; expected one of {', '.join(SIM_VARIANTS)}")
    workload = raw.get("workload", "raw")
    if workload not in WORKLOADS:
        raise UsageError(f"--workload: {workload!r} is not a workload; expected one of {', '.join(WORKLOADS)}")
    if variant == "pipeline" and workload != "raw":
        raise UsageError(f"--workload {workload} and --variant pipeline exclude each other (it runs raw payloads)")
    plant = raw.get("plant", "")
    if plant and plant not in PLANTS:
        raise UsageError(f"--plant: {plant!r} is not a bug to plant; expected one of {', '.join(PLANTS)}")
    if plant and variant != "pipeline":
        raise UsageError("--plant needs --variant pipeline")
    observers = plain_decimal("observers", raw.get("observers", "0"), 255)
    spares = plain_decimal("spares", raw.get("spares", "0"), 255)
    if observers + spares >= nodes:
        raise UsageError(f"--observers {observers} and --spares {spares} of {nodes} nodes leave nobody to vote; "
                         f"expected at most {nodes - 1} together")
    rc = plain_decimal("random-changes", raw["random-changes"], 10_000) if "random-changes" in raw else None
    return SimArgs(
        seed, nodes, rounds, proposals, partition, tuple(faults), raw.get("dump"), "check" in flags, rf, variant,
        workload, observers, spares, rc, plant,
    )


def main(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except HelpRequested:
        print(HELP)
        return 0
    except UsageError as exc:
        print(f"zabd sim: {exc}", file=sys.stderr)
        return 2
    # Imported after parsing: usage errors stay cheap.
    from zabd.sim.simulator import SimConfig

    faults = args.faults
    if args.random_faults is not None:
        draw = pipeline_faults if args.variant == "pipeline" else random_faults  # the former adds power losses
        faults = tuple(draw(args.seed, args.nodes, args.rounds, args.random_faults))
        print(f"faults: {format_faults(list(faults))}", file=sys.stderr)
    if args.random_changes is not None:
        changes = random_changes(args.seed, args.nodes, args.rounds, args.random_changes)
        print(f"changes: {format_faults(list(changes))}", file=sys.stderr)
        faults = tuple(sorted((*faults, *changes), key=lambda e: e.start if isinstance(e, Cut) else e.at))
    options, pipeline = variant_options(args.variant)
    config = SimConfig(
        args.seed, args.nodes, args.rounds, args.proposals, args.partition, faults, options,
        args.workload, args.observers, args.spares, pipeline, args.plant,
    )
    try:
        raw, violation = _run(config, args.check)
    except CounterOverflow as exc:
        print(f"zabd sim: {exc}", file=sys.stderr)
        return 1
    if args.dump is not None:
        try:
            with open(args.dump, "wb") as fh:
                fh.write(raw)
        except OSError as exc:
            print(f"zabd sim: cannot write --dump {args.dump}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    if violation is not None:
        print(f"zabd sim: safety violation: {violation.describe()}", file=sys.stderr)
        print(f"zabd sim: reproduce with: {violation.reproducer}", file=sys.stderr)
    from zabd.sim.dump import digest

    sys.stdout.write(digest(raw))
    sys.stdout.flush()
    return 1 if violation is not None else 0


def _run(config: SimConfig, check: bool) -> tuple[bytes, Violation | None]:
    """The canonical dump, and the checker's verdict with ``check``. Without
    it nothing watches the effects (a sweep's metrics are not printed here)."""
    if check:
        from zabd.sim.run import run_scenario

        result = run_scenario(config, check=True, keep_dump=True)
        assert result.dump is not None
        return result.dump, result.violation
    from zabd.sim.dump import dump
    from zabd.sim.simulator import Simulator

    sim = Simulator(config)
    nodes = sim.run()
    return dump(nodes, sim.disks.logs if sim.disks is not None else None), None
