"""Every canonical digest must come out identical (spec section 11)."""

from __future__ import annotations

import random
import subprocess
import sys
from typing import Any

import pytest

from tests.sim.vectors import REPO_VECTORS, SHARED_VECTORS, cli_args, config_of, load
from zabd.sim import SimConfig, Simulator, digest, dump, random_faults
from zabd.sim.run import run_scenario

REPO = load(REPO_VECTORS)
SHARED = load(SHARED_VECTORS) if SHARED_VECTORS.exists() else []


@pytest.mark.parametrize("vector", REPO, ids=[v["name"] for v in REPO])
def test_repo_vector(vector: dict[str, Any]) -> None:
    assert digest(dump(Simulator(config_of(vector)).run())) == vector["digest"]


@pytest.mark.skipif(not SHARED, reason="../shared/spec/vectors.json not present")
@pytest.mark.parametrize("vector", SHARED, ids=[v["name"] for v in SHARED])
def test_shared_vector(vector: dict[str, Any]) -> None:
    assert digest(dump(Simulator(config_of(vector)).run())) == vector["digest"]


@pytest.mark.parametrize("vector", REPO, ids=[v["name"] for v in REPO])
def test_tick_by_tick_loop_gives_the_same_digest(vector: dict[str, Any]) -> None:
    """The idle-tick skipping is an optimisation only: section 7's literal loop agrees."""
    assert digest(dump(Simulator(config_of(vector), skip_idle=False).run())) == vector["digest"]


@pytest.mark.parametrize("vector", REPO, ids=[v["name"] for v in REPO])
def test_checker_finds_no_violation_in_vectors(vector: dict[str, Any]) -> None:
    result = run_scenario(config_of(vector), check=True)
    assert result.digest == vector["digest"]
    assert result.violation is None, result.violation.describe()


@pytest.mark.skipif(not SHARED, reason="../shared/spec/vectors.json not present")
@pytest.mark.parametrize("vector", SHARED, ids=[v["name"] for v in SHARED])
def test_the_cli_prints_every_shared_vector_digest(vector: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """In process: ``zabd sim`` without ``--check`` runs the simulator with
    nothing watching its effects; with it, through the checker."""
    from zabd.sim.cli import main

    for extra in ([], ["--check"]):
        assert main([*cli_args(vector), *extra]) == 0
        assert capsys.readouterr().out == vector["digest"]


def test_cli_prints_the_digest_with_no_newline() -> None:
    v = REPO[1]
    out = subprocess.run([sys.executable, "-m", "zabd", "sim", *cli_args(v)], capture_output=True, check=True)
    assert out.stdout == v["digest"].encode()
    assert out.stderr == b""


def test_cli_on_a_fault_vector() -> None:
    v = next(x for x in REPO if "faults" in x and "partition" in x)
    out = subprocess.run(["zabd", "sim", *cli_args(v)], capture_output=True, text=True, check=True)
    assert out.stdout == v["digest"]


@pytest.mark.parametrize("seed", range(40))
def test_fast_loop_equals_the_literal_loop_on_random_faults(seed: int) -> None:
    """Idle-tick skipping must see every wake, including a follower that lost
    its leader's link in the middle of a tick (v1.4) and must tick at once."""
    rng = random.Random(seed)
    n = rng.randint(2, 7)
    rounds = rng.randint(200, 3000)
    faults = tuple(random_faults(rng.getrandbits(64), n, rounds, rng.randint(1, 25), max_down=n))
    config = SimConfig(rng.getrandbits(64), n, rounds, rng.randint(0, 80), frozenset(), faults)
    fast = digest(dump(Simulator(config).run()))
    assert fast == digest(dump(Simulator(config, skip_idle=False).run())), config.command()
