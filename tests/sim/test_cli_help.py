"""``zabd sim --help`` and the shell-safe one-way cut, beyond spec section 1:
neither changes what any other argument list does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from zabd.sim import SimConfig
from zabd.sim.cli import parse_args
from zabd.sim.faults import Cut, FaultSpecError, parse_faults
from zabd.sim.run import run_scenario

BASE = ["--seed", "1", "--nodes", "3", "--rounds", "1000", "--proposals", "10"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zabd", "sim", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("argv", [["--help"], ["-h"], [*BASE, "--help"]])
def test_help_prints_usage_on_stdout_and_exits_0(argv: list[str]) -> None:
    r = run(*argv)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("usage: zabd sim --seed S --nodes N") and "--faults SPEC" in r.stdout


def test_help_as_an_option_value_is_still_a_missing_value() -> None:
    r = run(*BASE, "--dump", "--help")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == "zabd sim: option --dump needs a value"


def test_to_is_the_same_one_way_cut_as_the_quoted_form() -> None:
    assert parse_faults("cut:1to2@5-9", 3) == parse_faults("cut:1>2@5-9", 3) == [Cut(1, 2, 5, 9, False)]
    with pytest.raises(FaultSpecError):
        parse_faults("cut:1to1@5-9", 3)


def test_the_unquoted_to_form_runs_in_a_shell_with_the_same_digest(tmp_path: Path) -> None:
    config = SimConfig(1, 3, 1000, 10, faults=parse_args([*BASE, "--faults", "cut:1>2@50-90"]).faults)
    cmd = " ".join([sys.executable, "-m", "zabd", "sim", *BASE, "--faults", "cut:1to2@50-90,cut:2-3@100-200"])
    out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    both = SimConfig(1, 3, 1000, 10, faults=(*config.faults, Cut(2, 3, 100, 200, True)))
    assert out.stdout == run_scenario(both, check=False).digest
    assert list(tmp_path.iterdir()) == []  # no redirection left a file behind
