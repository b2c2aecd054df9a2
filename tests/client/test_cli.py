"""The client commands and the load generator, against real server processes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.client.cli_support import zabd
from zabd.client.spawn import LocalCluster


def test_propose_status_log_json(cluster: LocalCluster) -> None:
    servers = ",".join(cluster.servers)
    r = zabd("propose", "--servers", cluster.client_addr(2), "--json", "alpha", "beta")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 2 and rows[0]["zxid"] < rows[1]["zxid"]

    r = zabd("status", "--servers", servers, "--json")
    assert r.returncode == 0, r.stderr
    sts = [json.loads(line) for line in r.stdout.splitlines()]
    assert sorted(s["id"] for s in sts) == [1, 2, 3]
    assert sum(s["role"] == "leading" for s in sts) == 1
    assert len({s["leader"] for s in sts}) == 1

    r = zabd("log", "--servers", cluster.client_addr(3), "--json")
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in r.stdout.splitlines()]
    assert [e["payload"] for e in log][-2:] == ["alpha", "beta"]
    assert [e["zxid"] for e in log][-2:] == [rows[0]["zxid"], rows[1]["zxid"]]

    r = zabd("log", "--servers", cluster.client_addr(1), "--from", log[-1]["zxid_str"])
    assert r.returncode == 0 and r.stdout.strip().endswith("beta")


def test_human_output_and_errors(cluster: LocalCluster) -> None:
    r = zabd("status", "--servers", cluster.client_addr(1))
    assert r.returncode == 0 and "node 1" in r.stdout
    r = zabd("status", "--servers", "127.0.0.1:1")
    assert r.returncode == 1 and "unreachable" in r.stdout
    r = zabd("propose", "--servers", "nonsense", "x")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    r = zabd("log", "--servers", cluster.client_addr(1), "--from", "x:y")
    assert r.returncode == 2 and "--from" in r.stderr


def test_log_verify_of_a_directory_that_holds_no_data(tmp_path: Path) -> None:
    r = zabd("log", "verify", str(tmp_path))
    assert r.returncode == 2 and r.stdout == ""
    expected = f"zabd log verify: {tmp_path}: not a zabd data directory (no epochs file, log or snap folder)"
    assert r.stderr.strip() == expected
    r = zabd("log", "verify", str(tmp_path / "missing"))
    assert r.returncode == 2 and "not a directory" in r.stderr and "Traceback" not in r.stderr


def test_bench_spawn_json() -> None:
    r = zabd(
        "bench",
        "--spawn",
        "3",
        "--clients",
        "2",
        "--window",
        "8",
        "--payload",
        "64",
        "--duration",
        "1",
        "--warmup",
        "0.5",
        "--json",
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    keys = ("ops", "ops_per_s", "p50_ms", "p99_ms", "p999_ms", "errors", "nodes", "payload", "storage", "fsync")
    for key in (*keys, "fsyncs_per_s", "txns_per_fsync"):
        assert key in out
    # the default is the durable log with fsync on
    assert out["ops"] > 0 and out["nodes"] == 3 and out["payload"] == 64 and out["storage"] == "disk"
    assert out["fsync"] is True and out["fsyncs_per_s"] > 0 and out["txns_per_fsync"] >= 1
    assert out["p50_ms"] <= out["p99_ms"] <= out["p999_ms"]
    assert "ops/s" in r.stderr  # the progress line


def test_bench_spawn_single_disk_node() -> None:
    r = zabd("bench", "--spawn", "1", "--storage", "disk", "--duration", "0.5", "--warmup", "0", "--json", timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["storage"] == "disk" and out["nodes"] == 1 and out["ops"] > 0


def test_bench_loads_zookeepers_port_with_each_op() -> None:
    for op in ("set", "get", "create"):
        r = zabd("bench", "--spawn", "3", "--storage", "disk", "--zookeeper", op, "--clients", "4", "--window", "8",
                 "--duration", "1", "--warmup", "0.5", "--no-progress", "--json", timeout=120)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        assert out["zookeeper"] == op and out["ops"] > 0 and out["errors"] == 0, out
        # writes go through the log: fsyncs happen; reads need none
        assert (out["fsyncs_per_s"] > 0) == (op != "get"), out
