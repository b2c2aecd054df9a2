"""go-zookeeper/zk's own test suite (v1.0.4, its tests unmodified) against ZooKeeper 3.8 and zabd.

    python bench/gozk_suite.py --target both --count 5 \\
        --run 'TestIntegration_(ClientClusterFailover|Reconfig|IncrementalReconfig)$'
    python bench/gozk_suite.py --target both --count 1          # the whole suite

Needs ``go`` (Debian 12's golang-go 1.19 builds it), the go-zookeeper/zk
v1.0.4 source (``--src`` or ``$GOZK_SRC``, default /work/gozk-src: the Go
module proxy's zip or ``git archive v1.0.4`` of github.com/go-zookeeper/zk),
and for ``zookeeper`` Debian's ``zookeeper`` package (3.8.0).

What it does, for each target:

* copies the source to ``<out>/src`` and applies ``PATCH`` (below) to that copy,
  the same for both targets;
* writes ``<out>/bin/zkServer.sh``, which execs ``scripts/gozk_server.py``: the
  harness's ``ZOOKEEPER_BIN_PATH`` names that directory, and ``GOZK_TARGET``
  tells the stand-in to run Debian's zkServer.sh or ``zabd serve`` (see it);
* runs ``go test -json -count N -run REGEX`` with ``ZK_VERSION=3.8.0`` (the
  suite skips its reconfig tests without it) and ``TMPDIR=<out>/tmp``;
* prints a table (test, passed/failed/skipped of N per target), writes each
  failed run's output with the list of the server logs of its time window to
  ``<out>/failures/<target>/<Test>-<k>.txt``; servers' logs are in
  ``<out>/logs/<target>/`` (zabd's TOML beside each log);
* ends, by PID, any server the harness left running (one whose environment
  holds this run's ``GOZK_LOG_DIR``), e.g. after a ``go test`` timeout panic.

Exit status: 0 when every test that passed on ZooKeeper in every run passed on
zabd in every run too (``--target both``), or no run failed (one target).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAND_IN = REPO / "scripts" / "gozk_server.py"
DEFAULT_SRC = "/work/gozk-src"
THREE = "TestIntegration_(ClientClusterFailover|Reconfig|IncrementalReconfig)$"

# The harness's start check (StartTestCluster -> waitForStart) calls FLWSrvr, whose
# regexp wants "Zookeeper version: <[A-Za-z0-9.-]+>, built on MM/DD/YYYY HH:MM ZONE"
# and which fails when that date does not parse. Debian's 3.8.0 answers
# "3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC", zabd
# "3.8.0-zabd-<v>, built on zabd": neither matches, so no cluster ever "starts".
# The patch takes any version and build text, and leaves BuildTime zero when the
# date does not parse; nothing else of srvr's parsing changes (TestFLWSrvr's
# canned 3.4.6 answer still parses its date).
PATCH: list[tuple[str, str, str]] = [
    (
        "flw.go",
        r"zrVer   = `^Zookeeper version: ([A-Za-z0-9\.\-]+), "
        r"built on (\d\d/\d\d/\d\d\d\d \d\d:\d\d [A-Za-z0-9:\+\-]+)`",
        r"zrVer   = `^Zookeeper version: ([^,\n]+), built on ([^\n]+)`",
    ),
    (
        "flw.go",
        'buildTime, err := time.Parse("01/02/2006 15:04 MST", match[1])\n\n'
        "\t\tif err != nil {\n"
        "\t\t\tss[i] = &ServerStats{Server: servers[i], Error: err}\n"
        "\t\t\timOk = false\n"
        "\t\t\tcontinue\n"
        "\t\t}\n",
        'buildTime, _ := time.Parse("01/02/2006 15:04 MST", match[1])\n',
    ),
]


class SetupError(Exception):
    pass


def available(src: str | Path) -> tuple[bool, str]:
    """Whether the suite can run here: go on the PATH and the source at ``src``."""
    if shutil.which("go") is None:
        return False, "no go on the PATH (apt-get install -y golang-go)"
    if not (Path(src) / "server_java_test.go").exists():
        return False, f"no go-zookeeper/zk source at {src} (set GOZK_SRC; see docs/zookeeper.md)"
    return True, ""


def zookeeper_available() -> tuple[bool, str]:
    if not Path("/usr/share/zookeeper/bin/zkServer.sh").exists():
        return False, "ZooKeeper is not installed (apt-get install -y zookeeper)"
    if shutil.which("java") is None:
        return False, "no java on the PATH"
    return True, ""


def prepare_source(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(".git"))
    for name, old, new in PATCH:
        path = dest / name
        text = path.read_text()
        if text.count(old) != 1:
            raise SetupError(f"{src}/{name}: the text the patch replaces is not there once; is it v1.0.4?")
        path.write_text(text.replace(old, new))


def write_bin(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    sh = bin_dir / "zkServer.sh"
    sh.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
    sh.chmod(0o755)


@dataclass
class Run:
    test: str
    start: float
    output: list[str] = field(default_factory=list)
    result: str = ""  # pass, fail, skip
    end: float = 0.0


def parse_time(stamp: str) -> float:
    # go's RFC 3339 with nanoseconds and a zone: keep to microseconds for fromisoformat
    from datetime import datetime

    head, _, rest = stamp.partition(".")
    if not rest:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    digits = "".join(c for c in rest if c.isdigit())
    zone = rest[len(digits):].replace("Z", "+00:00")
    return datetime.fromisoformat(f"{head}.{digits[:6]:0<6}{zone}").timestamp()


def run_target(target: str, args: argparse.Namespace, out: Path, src: Path) -> list[Run]:
    logs = out / "logs" / target
    logs.mkdir(parents=True, exist_ok=True)
    tmp = out / "tmp" / target
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.update(
        ZOOKEEPER_BIN_PATH=str(out / "bin"),
        ZK_VERSION="3.8.0",
        GOZK_TARGET=target,
        GOZK_LOG_DIR=str(logs),
        GOZK_PYTHON=sys.executable,
        TMPDIR=str(tmp),
        GOPROXY="off",
        GOFLAGS="-mod=mod",
        PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    )
    argv = ["go", "test", "-json", "-count", str(args.count), "-timeout", args.go_timeout]
    if args.run:
        argv += ["-run", args.run]
    argv.append(".")
    print(f"[{target}] {' '.join(argv)}  (logs {logs})", file=sys.stderr, flush=True)
    runs: list[Run] = []
    current: dict[str, Run] = {}
    with open(out / f"go-test-{target}.jsonl", "w") as raw:
        proc = subprocess.Popen(argv, cwd=src, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                raw.write(line)
                try:
                    ev = json.loads(line)
                except ValueError:  # a build error or a panic outside a test
                    sys.stderr.write(line)
                    continue
                test = ev.get("Test")
                if not test:
                    if ev.get("Action") == "output" and not ev["Output"].startswith(("ok ", "PASS", "FAIL\n")):
                        sys.stderr.write(ev["Output"])
                    continue
                action = ev.get("Action")
                t = parse_time(ev["Time"]) if "Time" in ev else time.time()
                if action == "run":
                    current[test] = Run(test, t)
                    runs.append(current[test])
                elif action == "output" and test in current:
                    current[test].output.append(ev["Output"])
                elif action in ("pass", "fail", "skip") and test in current:
                    r = current.pop(test)
                    r.result, r.end = action, t
                    if "/" not in test:
                        took = ev.get("Elapsed", 0)
                        print(f"[{target}] {action:4} {test} ({took:.1f}s)", file=sys.stderr, flush=True)
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            end_leftovers(logs)
    for r in current.values():  # no result: the binary died (timeout panic) during it
        r.result, r.end = "fail", time.time()
    save_failures(target, runs, out, logs)
    return runs


def end_leftovers(logs: Path) -> None:
    """SIGKILL (as the harness does) any server still running with this run's log dir."""
    mark = f"GOZK_LOG_DIR={logs}".encode()
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit() or int(proc_dir.name) == os.getpid():
            continue
        try:
            environ = (proc_dir / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if mark in environ:
            print(f"ending leftover server pid {proc_dir.name}", file=sys.stderr)
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc_dir.name), signal.SIGKILL)


def save_failures(target: str, runs: list[Run], out: Path, logs: Path) -> None:
    fail_dir = out / "failures" / target
    seen: dict[str, int] = {}
    for r in runs:
        if "/" in r.test:
            continue
        seen[r.test] = seen.get(r.test, 0) + 1
        if r.result != "fail":
            continue
        fail_dir.mkdir(parents=True, exist_ok=True)
        window = [p for p in sorted(logs.glob(f"*-{r.test}[0-9]*.log")) if r.start - 1 <= _started(p) <= r.end + 1]
        sub = [s for s in runs if s.test.startswith(r.test + "/") and s.start >= r.start and s.end <= r.end + 1]
        body = [f"{target} {r.test} run {seen[r.test]}: {r.result}\n", "server logs:\n"]
        body += [f"  {p}\n" for p in window]
        body += ["\n", *r.output]
        for s in sub:
            body += [f"\n--- subtest {s.test}: {s.result}\n", *s.output]
        (fail_dir / f"{r.test}-{seen[r.test]}.txt").write_text("".join(body))


def _started(log: Path) -> float:
    """When the stand-in started the server of this log (its name begins with the ms)."""
    head = log.name.split("-", 1)[0]
    return int(head) / 1000 if head.isdigit() else 0.0


def tally(runs: list[Run]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for r in runs:
        if "/" in r.test:
            continue
        counts = out.setdefault(r.test, {"pass": 0, "fail": 0, "skip": 0})
        counts[r.result] += 1
    return out


def cell(counts: dict[str, int] | None) -> str:
    if not counts:
        return "-"
    n = sum(counts.values())
    if counts["skip"] == n:
        return f"skip {n}"
    text = f"{counts['pass']}/{n} passed"
    return text + (f", {counts['skip']} skipped" if counts["skip"] else "")


def run_suite(targets: list[str], count: int, run: str, src: Path, out: Path,
              go_timeout: str = "60m") -> dict[str, dict[str, dict[str, int]]]:
    """Run the suite once per target; {target: {test: {pass, fail, skip}}}.
    Raises SetupError when it cannot run here."""
    ok, why = available(src)
    if not ok:
        raise SetupError(why)
    if "zookeeper" in targets:
        ok, why = zookeeper_available()
        if not ok:
            raise SetupError(why)
    out.mkdir(parents=True, exist_ok=True)
    copy = out / "src"
    shutil.rmtree(copy, ignore_errors=True)
    prepare_source(src, copy)
    write_bin(out / "bin")
    opts = argparse.Namespace(count=count, run=run, go_timeout=go_timeout)
    return {t: tally(run_target(t, opts, out, copy)) for t in targets}


def worse_on_zabd(results: dict[str, dict[str, dict[str, int]]]) -> list[str]:
    """Tests that passed on ZooKeeper every time they ran and did not on zabd."""
    zk, zabd = results["zookeeper"], results["zabd"]
    worse = []
    for name, z in sorted(zk.items()):
        if z["fail"] == 0 and z["pass"] > 0:
            d = zabd.get(name)
            if not d or d["fail"] or d["pass"] != z["pass"]:
                worse.append(name)
    return worse


def table(results: dict[str, dict[str, dict[str, int]]]) -> str:
    targets = list(results)
    names = sorted({name for res in results.values() for name in res})
    width = max([len(n) for n in names] + [4])
    lines = [f"{'test':{width}}  " + "  ".join(f"{t:18}" for t in targets)]
    lines += [f"{n:{width}}  " + "  ".join(f"{cell(results[t].get(n)):18}" for t in targets) for n in names]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", choices=["zookeeper", "zabd", "both"], default="both")
    p.add_argument("--count", type=int, default=1, help="go test -count (default 1)")
    p.add_argument("--run", default="", help="go test -run REGEX (default: every test)")
    p.add_argument("--src", default=os.environ.get("GOZK_SRC", DEFAULT_SRC), help="go-zookeeper/zk v1.0.4 source")
    p.add_argument("--out", default="", help="output dir (default: a fresh /tmp/gozk-suite-*)")
    p.add_argument("--go-timeout", default="60m", help="go test -timeout (default 60m)")
    args = p.parse_args(argv)
    targets = ["zookeeper", "zabd"] if args.target == "both" else [args.target]
    out = Path(args.out or tempfile.mkdtemp(prefix="gozk-suite-")).resolve()
    try:
        results = run_suite(targets, args.count, args.run, Path(args.src), out, args.go_timeout)
    except SetupError as exc:
        print(f"gozk_suite: {exc}", file=sys.stderr)
        return 2
    text = table(results)
    if len(targets) == 2:
        worse = worse_on_zabd(results)
        text += f"\npassed on ZooKeeper every time but not on zabd: {', '.join(worse) or 'none'}\n"
    else:
        worse = [n for n, c in results[targets[0]].items() if c["fail"]]
    text += f"output: {out} (failures/<target>/, logs/<target>/, go-test-<target>.jsonl)\n"
    (out / "summary.txt").write_text(text)
    print(text)
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main())
