"""Sweeps on a real local Spark (local[2]): Parquet rows, summary, plots, exit status."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from zabd.pipeline.cli import main as pipeline_main
from zabd.pipeline.grid import Grid, make_grid
from zabd.pipeline.scenarios import COLUMN_NAMES, scenario_config
from zabd.pipeline.sweep import SCENARIOS_DIR, SweepReport, sweep
from zabd.sim.faults import parse_faults
from zabd.sim.run import run_scenario

pytestmark = [pytest.mark.spark, pytest.mark.filterwarnings("ignore::FutureWarning")]

PNG = b"\x89PNG\r\n\x1a\n"


def read_rows(out: Path) -> list[dict[str, Any]]:
    # Read back with pyarrow, not Spark: the files must stand on their own.
    table = pq.read_table(out / SCENARIOS_DIR)
    rows: list[dict[str, Any]] = table.to_pylist()
    return sorted(rows, key=lambda r: r["index"])


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "zabd", *args], capture_output=True, text=True, timeout=120)


def test_small_grid_with_faults(spark: Any, tmp_path: Path) -> None:
    grid = make_grid(
        {
            "scenarios": 320,
            "seed": 2026,
            "nodes": [3, 5],
            "rounds": [1500],
            "proposals": [15],
            "faults_per_run": [0, 2, 6],
        }
    )
    report = sweep(spark, grid, str(tmp_path), progress=False)
    assert report.ok and report.failures == 0
    assert report.tasks >= 2  # spread over both cores

    rows = read_rows(tmp_path)
    assert [r["index"] for r in rows] == list(range(320))
    assert set(rows[0]) == set(COLUMN_NAMES)
    faulted = [r for r in rows if r["faults_per_run"] > 0]
    assert sum(1 for r in faulted if r["fault_events"] > 0) > 0.9 * len(faulted)
    assert all(r["faults"] == "" for r in rows if r["faults_per_run"] == 0)
    for r in rows:
        assert r["ok"] and r["violation_kind"] is None and r["reproducer"] is None and r["error"] is None
        assert r["kind"] == "sim" and r["sweep_seed"] == 2026
        _, config, _ = scenario_config(grid, r["index"])
        assert (r["seed"], r["nodes"], r["rounds"], r["proposals"]) == (
            config.seed,
            config.nodes,
            config.rounds,
            config.proposals,
        )
        assert r["command"] == config.command() + " --check"
        assert len(parse_faults(r["faults"], r["nodes"])) == r["fault_events"]
        assert r["fault_rate"] == pytest.approx(r["fault_events"] * 1000 / r["rounds"])
        assert len(r["digest"]) == 64
        assert 0 <= r["committed"] <= r["proposals"]
        assert r["messages_sent"] > 0 and r["deliveries"] > 0
        if r["first_leader_tick"] is not None:
            assert r["elections"] >= 1
        if r["commit_latency_p50"] is not None:
            assert 0 < r["commit_latency_p50"] <= r["commit_latency_p99"]
    clean = [r for r in rows if r["faults_per_run"] == 0]
    assert all(r["committed"] == 15 and r["messages_dropped"] == 0 and r["elections"] == 1 for r in clean)
    assert sum(r["messages_dropped"] for r in faulted) > 0

    # the rows are the simulator's own results: re-run a few in-process, and one through its command
    for r in rows[::80]:
        assert run_scenario(scenario_config(grid, r["index"])[1]).digest == r["digest"]
    r = next(r for r in faulted if r["fault_events"] >= 3)
    argv = shlex.split(r["command"])
    assert argv[:2] == ["zabd", "sim"]
    proc = run_cli(*argv[1:])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == r["digest"]

    # summary and plots
    assert {(c["nodes"], c["faults_per_run"]) for c in report.cells} == {(n, f) for n in (3, 5) for f in (0, 2, 6)}
    assert sum(c["scenarios"] for c in report.cells) == 320
    for c in report.cells:
        if c["faults_per_run"] == 0:
            assert c["committed_mean"] == 15 and c["drop_pct"] == 0
        assert c["first_leader_p50"] is not None and c["latency_p50_median"] is not None
    for name in ("latency.png", "election.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 10_000
    meta = json.loads((tmp_path / "sweep.json").read_text())
    assert meta["failures"] == 0 and meta["grid"]["scenarios"] == 320
    assert "lat p99" in (tmp_path / "summary.txt").read_text()


def test_same_sweep_same_rows_whatever_the_task_split(spark: Any, tmp_path: Path) -> None:
    grid = make_grid({"scenarios": 90, "seed": 5, "nodes": [3, 7], "rounds": [1200], "faults_per_run": [4]})
    sweep(spark, grid, str(tmp_path / "a"), task_size=7, progress=False, plots=False)
    sweep(spark, grid, str(tmp_path / "b"), task_size=90, progress=False, plots=False)
    a, b = read_rows(tmp_path / "a"), read_rows(tmp_path / "b")
    assert len(a) == 90 and a == b
    assert len(list((tmp_path / "a" / SCENARIOS_DIR).glob("*.parquet"))) > len(
        list((tmp_path / "b" / SCENARIOS_DIR).glob("*.parquet"))
    )


def test_known_bad_history_is_reported_with_exit_status_1(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hand-made history with a lost commit, run on the executors among real
    scenarios: it must reach the Parquet rows, the summary, stderr and the exit status."""
    grid_file = tmp_path / "grid.toml"
    grid_file.write_text(
        "scenarios = 40\nseed = 9\nnodes = [3]\nrounds = 1200\nfaults_per_run = [3]\n"
        'canaries = ["clean", "lost-commit"]\n'
    )
    out = tmp_path / "out"
    rc = pipeline_main(["sweep", "--grid", str(grid_file), "--out", str(out), "--quiet", "--no-plots"])
    captured = capsys.readouterr()
    assert rc == 1
    assert "1 scenario(s) violated safety" in captured.err
    assert "#41 handmade:lost-commit (3 nodes) lost-commit: leader of epoch 2 lacks committed zxid 1:1" in captured.err
    assert "reproduce: zabd pipeline handmade lost-commit" in captured.err
    assert "40 scenarios" not in captured.err and "42 scenarios in" in captured.out

    rows = read_rows(out)
    assert len(rows) == 42
    bad = [r for r in rows if not r["ok"]]
    assert [(r["index"], r["kind"], r["violation_kind"], r["violation_tick"], r["violation_node"]) for r in bad] == [
        (41, "handmade:lost-commit", "lost-commit", 200, 3)
    ]
    assert rows[40]["kind"] == "handmade:clean" and rows[40]["ok"]
    assert json.loads((out / "sweep.json").read_text())["failures"] == 1

    # the printed reproducer reproduces it
    proc = run_cli("pipeline", "handmade", "lost-commit")
    assert proc.returncode == 1
    assert "lost-commit: leader of epoch 2 lacks committed zxid 1:1" in proc.stderr
    assert proc.stdout == bad[0]["digest"]


def test_cli_flags_sweep_prints_summary(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = pipeline_main(
        [
            "sweep",
            "--scenarios",
            "60",
            "--seed",
            "3",
            "--nodes",
            "3,5",
            "--rounds",
            "1000",
            "--proposals",
            "10",
            "--faults-per-run",
            "2",
            "--out",
            str(tmp_path),
            "--no-plots",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    lines = captured.out.splitlines()
    assert lines[0].split()[:4] == ["nodes", "faults", "ev/1kt", "scenarios"]
    assert lines[1].split()[:2] == ["3", "2"] and lines[2].split()[:2] == ["5", "2"]
    assert "60 scenarios in" in captured.out
    assert captured.err.splitlines()[-1].startswith("sweep: 60 scenarios in ")  # the progress line's last word
    assert len(read_rows(tmp_path)) == 60


@pytest.mark.soak
def test_soak_large_faulted_sweep_has_no_violations(spark: Any, tmp_path: Path) -> None:
    """20,000 scenarios up to 16 faults per run: a search for safety violations (~2 min on 2 cores)."""
    grid = make_grid(
        {
            "scenarios": 20_000,
            "seed": 99,
            "nodes": [3, 5, 7],
            "rounds": [3000],
            "proposals": [30],
            "faults_per_run": [0, 4, 8, 16],
        }
    )
    report = sweep(spark, grid, str(tmp_path), progress=False, plots=False)
    assert report.failures == 0, report.failed_rows
    assert sum(c["scenarios"] for c in report.cells) == 20_000
    assert all(c["drop_pct"] > 0 for c in report.cells if c["faults_per_run"] > 0)


def test_the_server_variant_sweeps_and_replays(spark: Any, tmp_path: Path) -> None:
    """--variant server: the windowed protocol with sync plans, checked; a
    row's command replays it with zabd sim."""
    grid = make_grid(
        {"scenarios": 120, "seed": 5, "nodes": [3, 5], "rounds": [2500], "proposals": [80],
         "faults_per_run": [0, 6], "variant": "server"}
    )
    sweep_and_replay(spark, grid, tmp_path, "--variant server --check")


def test_the_pipeline_variant_sweeps_and_replays(spark: Any, tmp_path: Path) -> None:
    """--variant pipeline: the server's EffectPipeline over disks that lose
    unflushed writes, power losses among the faults; a row replays."""
    grid = make_grid(
        {"scenarios": 120, "seed": 5, "nodes": [3, 5], "rounds": [1500], "proposals": [60],
         "faults_per_run": [0, 6], "variant": "pipeline"}
    )
    report = sweep_and_replay(spark, grid, tmp_path, "--variant pipeline --check")
    # streamed SNAPs: the summary counts them, and how many a crash cut
    assert report.streams["snap_transfers"] > 0 and report.streams["installs"] > 0, report.streams
    summary = (tmp_path / "summary.txt").read_text()
    assert f"streamed SNAPs: {report.streams['snap_transfers']:,} sent" in summary
    # ... and the ones that outlived the election timeout, and how many installed without an election
    long, installed = report.streams["snaps_long"], report.streams["snaps_long_installed"]
    assert 0 <= installed <= long <= report.streams["snap_transfers"], report.streams
    assert f"longer than the election timeout {long:,}, installed without an election {installed:,}" in summary


def test_a_sweep_catches_the_bug_planted_in_the_pipeline(spark: Any, tmp_path: Path) -> None:
    """--plant early-send: an Ack may leave before the append it acknowledges
    is durable; a small sweep reports acked-lost, and its row replays."""
    grid = make_grid(
        {"scenarios": 200, "seed": 2, "nodes": [3, 5], "rounds": [1500], "proposals": [60],
         "faults_per_run": [3, 6], "variant": "pipeline", "plant": "early-send"}
    )
    report = sweep(spark, grid, str(tmp_path), progress=False, plots=False)
    assert report.failures > 0
    found = [r for r in report.failed_rows if r["violation_kind"] == "acked-lost"]
    assert found, report.failed_rows
    proc = run_cli(*shlex.split(found[0]["reproducer"])[1:])
    assert proc.returncode == 1 and "acked-lost" in proc.stderr


def sweep_and_replay(spark: Any, grid: Grid, out: Path, tail: str) -> SweepReport:
    """No failure; every fault-free run commits; a row's command replays its digest."""
    report = sweep(spark, grid, str(out), progress=False, plots=False)
    assert report.failures == 0, report.failed_rows
    rows = read_rows(out)
    assert len(rows) == grid.scenarios and all(r["committed"] > 0 for r in rows if r["faults_per_run"] == 0)
    r = next(r for r in rows if r["fault_events"] >= 3)
    assert r["command"].endswith(tail)
    proc = run_cli(*shlex.split(r["command"])[1:])
    assert proc.returncode == 0 and proc.stdout == r["digest"], proc.stderr
    return report


def test_the_zookeeper_workload_sweeps_and_replays(spark: Any, tmp_path: Path) -> None:
    """--workload zk: the leader decides ZooKeeper requests, every node applies
    them to a tree, the checker compares the trees zxid by zxid."""
    grid = make_grid(
        {"scenarios": 150, "seed": 9, "nodes": [3, 5], "rounds": [2500], "proposals": [80],
         "faults_per_run": [0, 6], "workload": "zk"}
    )
    assert grid.command().endswith("--workload zk")
    sweep_and_replay(spark, grid, tmp_path, "--workload zk --check")
