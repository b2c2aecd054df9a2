"""Grid expansion: every scenario is a pure function of (sweep seed, index)."""

from __future__ import annotations

import pytest

from zabd.pipeline.grid import Grid, GridError, Task, load_grid_file, make_grid, plan_tasks
from zabd.pipeline.scenarios import COLUMN_NAMES, run_index, run_task, scenario_config
from zabd.sim.faults import parse_faults


def grid(**kw: object) -> Grid:
    values: dict[str, object] = {"scenarios": 60, "seed": 11, "nodes": [3, 5], "faults_per_run": [0, 3]}
    values.update(kw)
    return make_grid(values)


def test_scenarios_are_derived_from_seed_and_index_only() -> None:
    a, b = grid(), grid()
    for i in range(a.scenarios):
        assert scenario_config(a, i) == scenario_config(b, i)
    seeds = {a.scenario_seed(i) for i in range(a.scenarios)}
    assert len(seeds) == a.scenarios  # neighbours are different runs
    assert scenario_config(grid(seed=12), 0)[1].seed != scenario_config(a, 0)[1].seed


def test_cells_are_covered_round_robin_and_faults_replay() -> None:
    g = grid()
    counts: dict[tuple[int, int], int] = {}
    for i in range(g.scenarios):
        _, config, requested = scenario_config(g, i)
        counts[(config.nodes, requested)] = counts.get((config.nodes, requested), 0) + 1
        spec = ",".join(str(e) for e in config.faults)
        assert tuple(parse_faults(spec, config.nodes)) == config.faults  # the reproducer's --faults is valid
        if requested == 0:
            assert config.faults == ()
        assert f"--seed {config.seed} --nodes {config.nodes}" in config.command()
    assert counts == {(3, 0): 15, (3, 3): 15, (5, 0): 15, (5, 3): 15}
    assert any(scenario_config(g, i)[1].faults for i in range(g.scenarios))


def test_plan_tasks_covers_every_index_once() -> None:
    for total, par, size in [(1, 2, None), (300, 2, None), (10_000, 2, None), (1_000_000, 8, None), (1000, 2, 333)]:
        tasks = plan_tasks(total, par, size)
        covered = [i for t in tasks for i in range(t.lo, t.hi)]
        assert covered == list(range(total))
        step = tasks[0].hi - tasks[0].lo  # the executors rebuild a task's range from its id alone
        assert all((t.lo, t.hi) == (t.task_id * step, min(total, (t.task_id + 1) * step)) for t in tasks)
        if size:
            assert max(t.hi - t.lo for t in tasks) == size
    # large grids: thousands of scenarios per task, not one
    big = plan_tasks(100_000_000, 800)
    assert min(t.hi - t.lo for t in big) >= 1000
    assert len(big) >= 800


def test_rows_match_the_schema_and_are_deterministic() -> None:
    g = grid(scenarios=8, canaries=["lost-commit", "clean"])
    cols = run_task(g, Task(0, 0, g.total))
    assert set(cols) == set(COLUMN_NAMES)
    assert cols["index"] == list(range(10))
    assert cols["kind"][-2:] == ["handmade:lost-commit", "handmade:clean"]
    assert cols["ok"][-2:] == [False, True]
    assert cols["violation_kind"][-2] == "lost-commit"
    assert cols["reproducer"][-2] == "zabd pipeline handmade lost-commit"
    assert all(cols["ok"][:8])
    again = run_index(g, 3)
    assert again["digest"] == cols["digest"][3]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({}, "scenarios: missing"),
        ({"scenarios": -1}, "scenarios: -1 is outside"),
        ({"scenarios": 5, "nodes": [0]}, "nodes: 0 is outside 1..=255"),
        ({"scenarios": 5, "nodes": [3, 3]}, "nodes: [3, 3] lists a value twice"),
        ({"scenarios": 5, "rounds": "1000"}, "rounds: '1000' is not an integer"),
        ({"scenarios": 5, "faults_per_run": []}, "faults_per_run: empty list"),
        ({"scenarios": 5, "canaries": ["nope"]}, "canaries: 'nope' is not a hand-made history"),
        ({"scenarios": 5, "variant": "pipelined"}, "variant: 'pipelined' is not a protocol variant"),
        ({"scenarios": 5, "plant": "early-send"}, "plant: early-send is planted in the pipeline variant only"),
        ({"scenarios": 5, "variant": "pipeline", "plant": "x"}, "plant: 'x' is not a bug to plant"),
        ({"scenarios": 5, "variant": "pipeline", "workload": "zk"}, "workload: 'zk' with variant 'pipeline'"),
    ],
)
def test_bad_grid_values_name_the_field(values: dict[str, object], message: str) -> None:
    with pytest.raises(GridError, match=message.replace("[", r"\[").replace("]", r"\]")):
        make_grid(values)


def test_grid_file(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    f = tmp_path / "g.toml"
    f.write_text('scenarios = 10\nseed = 3\nnodes = [3, 5]\nrounds = 1000\ntask_size = 4\nout = "x"\n')
    g, extra = load_grid_file(str(f))
    assert (g.scenarios, g.seed, g.nodes, g.rounds) == (10, 3, (3, 5), (1000,))
    assert extra == {"task_size": 4, "out": "x"}
    f.write_text("scenarios = 10\nbogus = 1\n")
    with pytest.raises(GridError, match="unknown key 'bogus'"):
        load_grid_file(str(f))
    f.write_text("scenarios = \n")
    with pytest.raises(GridError, match="not valid TOML"):
        load_grid_file(str(f))


def test_the_pipeline_variant_rows_replay_with_their_command() -> None:
    g = grid(scenarios=6, variant="pipeline", plant="early-send", faults_per_run=[6])
    assert g.command().endswith("--variant pipeline --plant early-send")
    row = run_index(g, 2)
    assert row["command"].endswith("--variant pipeline --plant early-send --check")
    assert "crash:1@" in row["faults"] and "crash:2@" in row["faults"]  # power losses among the faults
