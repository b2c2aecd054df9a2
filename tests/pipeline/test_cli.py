"""``zabd pipeline`` usage errors, and the optional pyspark dependency."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from zabd.pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]
A_FILE = str(Path(__file__).resolve())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "usage: zabd pipeline"),
        (["bogus"], "unknown command 'bogus'"),
        (["sweep"], "missing option --scenarios"),
        (["sweep", "--scenarios", "10"], "missing option --out"),
        (["sweep", "--scenarios", "x", "--out", "d"], "--scenarios: 'x' is not a plain decimal"),
        (["sweep", "--scenarios", "0", "--out", "d"], "--scenarios: 0 is outside"),
        (["sweep", "--scenarios", "5", "--out", "d", "--nodes", "3,,5"], "--nodes: '3,,5' is not a comma-separated"),
        (["sweep", "--scenarios", "5", "--out", "d", "--nodes", "0"], "--nodes: 0 is outside 1..=255"),
        (["sweep", "--scenarios", "5", "--out", "d", "--seed", "9223372036854775808"], "--seed: 9223372036854775808"),
        (["sweep", "--scenarios", "5", "--out", "d", "--faults-per-run", "10001"], "--faults-per-run: 10001"),
        (["sweep", "--scenarios", "5", "--out"], "option --out needs a value"),
        (["sweep", "--scenarios", "5", "--scenarios", "6"], "option --scenarios given twice"),
        (["sweep", "--scenarios=5"], "unknown option --scenarios=5"),
        (["sweep", "--grid", "/nonexistent.toml", "--out", "d"], "cannot read /nonexistent.toml"),
        (["sweep", "--grid", "g.toml", "--nodes", "3"], "--nodes conflicts with --grid"),
        (["audit"], "expected one or more data directories"),
        (["audit", "/nonexistent-dir"], "'/nonexistent-dir' does not exist"),
        (["handmade", "nope"], "expected one NAME of lost-commit"),
        (["audit", "/"], "'/' is not a zabd data directory"),
        (["sweep", "--scenarios", "5", "--out", A_FILE], f"--out: {A_FILE!r} exists and is not a directory"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and message in lines[0], captured.err


def test_without_pyspark_one_line_error(tmp_path: Path) -> None:
    # A None entry in sys.modules makes `import pyspark` fail as if it were not installed.
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from zabd.cli import main\n"
        f"sys.exit(main(['pipeline', 'sweep', '--scenarios', '5', '--out', {str(tmp_path)!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "zabd pipeline sweep: pyspark is not installed; install the extra: pip install 'zabd[pipeline]'"
    ]
    (tmp_path / "data" / "log").mkdir(parents=True)
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from zabd.cli import main\n"
        f"sys.exit(main(['pipeline', 'audit', {str(tmp_path / 'data')!r}]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.splitlines() == [
        "zabd pipeline audit: pyspark is not installed; install the extra: pip install 'zabd[pipeline]'"
    ]
    # and the simulator, the checker's hand-made replay, usage errors: all fine without it
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from zabd.cli import main\n"
        "assert main(['pipeline', 'handmade', 'clean']) == 0\n"
        "assert main(['sim', '--seed', '1', '--nodes', '3', '--rounds', '500', '--proposals', '3']) == 0\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_nothing_outside_the_pipeline_imports_pyspark() -> None:
    offenders = []
    for path in sorted((ROOT / "zabd").rglob("*.py")):
        if "pipeline" in path.relative_to(ROOT / "zabd").parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}:{node.lineno}" for n in names if n.split(".")[0] == "pyspark"]
    assert offenders == []
    # and importing the pipeline's CLI (what `zabd pipeline` loads first) does not load it either
    code = "import sys, zabd.cli, zabd.pipeline.cli, zabd.sim.run; assert 'pyspark' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
