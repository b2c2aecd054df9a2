"""Loading canonical vectors: the repo's copy, and ../shared's when present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from zabd.sim import SimConfig, parse_faults

REPO = Path(__file__).resolve().parents[2]
REPO_VECTORS = REPO / "tests" / "data" / "vectors.json"
SHARED_VECTORS = REPO.parent / "shared" / "spec" / "vectors.json"


def load(path: Path) -> list[dict[str, Any]]:
    vectors: list[dict[str, Any]] = json.loads(path.read_text())["vectors"]
    return vectors


def config_of(v: dict[str, Any]) -> SimConfig:
    ids = [int(x) for x in v.get("partition", "").split(",") if x]
    pairs = frozenset(zip(ids[::2], ids[1::2], strict=True))
    faults = tuple(parse_faults(v.get("faults", ""), v["nodes"]))
    return SimConfig(v["seed"], v["nodes"], v["rounds"], v["proposals"], pairs, faults)


def cli_args(v: dict[str, Any]) -> list[str]:
    args = ["--seed", str(v["seed"]), "--nodes", str(v["nodes"]), "--rounds", str(v["rounds"]),
            "--proposals", str(v["proposals"])]
    if "partition" in v:
        args += ["--partition", v["partition"]]
    if "faults" in v:
        args += ["--faults", v["faults"]]
    return args
