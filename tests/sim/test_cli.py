"""``zabd sim`` argument rules (spec sections 1 and 12)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from zabd.protocol.options import SERVER
from zabd.sim import SimConfig
from zabd.sim.cli import UsageError, parse_args
from zabd.sim.run import run_scenario

BASE = ["--seed", "1", "--nodes", "3", "--rounds", "1000", "--proposals", "10"]


def three_nodes_digest() -> str:
    """The digest of BASE, computed in-process (the vectors pin the spec)."""
    return run_scenario(SimConfig(1, 3, 1000, 10), check=False).digest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zabd", "sim", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "argv",
    [
        [],  # everything missing
        BASE[:6],  # --proposals missing
        [*BASE, "--seed", "2"],  # repeated
        [*BASE, "--bogus", "1"],  # unknown
        ["--seed=1", *BASE[2:]],  # --name=value is an unknown option
        [*BASE[:7], "--partition"],  # option without value
        [*BASE, "--partition", "--faults"],  # a value beginning with -- is missing
        ["--seed", "-1", *BASE[2:]],  # sign
        ["--seed", "+1", *BASE[2:]],
        ["--seed", "1 ", *BASE[2:]],
        ["--seed", "1_000", *BASE[2:]],
        ["--seed", "0x10", *BASE[2:]],
        ["--seed", "\u0661", *BASE[2:]],  # ARABIC-INDIC DIGIT ONE: a digit, but not ASCII
        ["--seed", str(1 << 64), *BASE[2:]],  # above 2^64-1
        ["--seed", "1", "--nodes", "0", *BASE[4:]],
        ["--seed", "1", "--nodes", "256", *BASE[4:]],
        [*BASE, "--partition", "1,2,3"],  # odd count
        [*BASE, "--partition", "1,4"],  # id outside 1..=n
        [*BASE, "--partition", "2,2"],  # s == d
        [*BASE, "--partition", "1,,2"],
        [*BASE, "--faults", "crash:1@5,crash:1@6"],  # crash of a node that is down
        [*BASE, "--faults", "restart:1@5"],  # restart of a node that is up
        [*BASE, "--faults", "restart:1@5,crash:1@5"],  # equal ticks apply in listed order
        [*BASE, "--faults", "cut:1>1@1-2"],
        [*BASE, "--faults", "cut:1>2@5-5"],
        [*BASE, "--faults", "cut:1>4@1-2"],
        [*BASE, "--faults", "Crash:1@5"],
        [*BASE, "--faults", "crash:1@5,"],
        [*BASE, "--faults", "crash:1 @5"],
        [*BASE, "--faults", f"crash:1@{1 << 64}"],
        ["positional", *BASE],
        [*BASE, "--variant", "fast"],  # not a variant
    ],
)
def test_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        parse_args(argv)


def test_usage_error_process_contract() -> None:
    out = run(*BASE, "--partition", "1,2,3")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("zabd sim: ")


def test_valid_forms() -> None:
    args = parse_args(["--proposals", "010", "--rounds", "007", "--nodes", "3", "--seed", str((1 << 64) - 1)])
    assert (args.seed, args.rounds, args.proposals) == ((1 << 64) - 1, 7, 10)
    assert parse_args([*BASE, "--partition", ""]).partition == frozenset()
    assert parse_args([*BASE, "--partition", "1,2,1,2"]).partition == frozenset({(1, 2)})
    assert parse_args([*BASE, "--faults", ""]).faults == ()
    bounce = parse_args([*BASE, "--faults", "crash:1@5,restart:1@5,cut:1-2@3-9,cut:2>3@1-2,crash:2@99999"])
    assert [str(e) for e in bounce.faults] == [
        "crash:1@5",
        "restart:1@5",
        "cut:1-2@3-9",
        "cut:2>3@1-2",
        "crash:2@99999",
    ]


def test_dump_file_holds_the_digested_bytes(tmp_path: Path) -> None:
    target = tmp_path / "cluster.dump"
    out = run(*BASE, "--dump", str(target))
    assert out.returncode == 0 and out.stdout == three_nodes_digest()
    data = target.read_bytes()
    assert data.startswith(b"DSEZAB01") and hashlib.sha256(data).hexdigest() == three_nodes_digest()


def test_unwritable_dump_fails_with_nothing_on_stdout(tmp_path: Path) -> None:
    out = run(*BASE, "--dump", str(tmp_path / "missing-dir" / "x"))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.count("\n") == 1


def test_random_faults_prints_a_replayable_spec() -> None:
    out = run(*BASE, "--random-faults", "6", "--check")
    assert out.returncode == 0, out.stderr
    spec = out.stderr.strip().removeprefix("faults: ")
    replay = run(*BASE, "--faults", spec)
    assert replay.returncode == 0 and replay.stdout == out.stdout


def test_check_flag_keeps_the_digest() -> None:
    out = run(*BASE, "--check")
    assert out.returncode == 0 and out.stdout == three_nodes_digest()


def test_server_variant_is_replayable_and_not_canonical() -> None:
    out = run(*BASE, "--faults", "crash:1@300,restart:1@400", "--variant", "server", "--check")
    assert out.returncode == 0, out.stderr
    config = SimConfig(
        1, 3, 1000, 10, faults=parse_args([*BASE, "--faults", "crash:1@300,restart:1@400"]).faults, options=SERVER
    )
    assert config.command().endswith("--variant server")
    assert out.stdout == run_scenario(config, check=False).digest
    assert run(*BASE, "--variant", "canonical").stdout == three_nodes_digest()


def test_a_reproducer_with_a_one_way_cut_runs_in_a_shell(tmp_path: Path) -> None:
    """``cut:1>2@...`` unquoted is a shell redirection (it once left a file
    named ``2@50-50`` behind): printed commands quote it."""
    config = SimConfig(1, 3, 1000, 10, faults=parse_args([*BASE, "--faults", "cut:1>2@50-90"]).faults)
    cmd = config.command().replace("zabd sim", f"{sys.executable} -m zabd sim", 1)
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout == run_scenario(config, check=False).digest
    assert list(tmp_path.iterdir()) == []
