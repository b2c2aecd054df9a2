"""kazoo 2.11.0's own test suite, unmodified, against a zabd cluster.

``scripts/kazoo_suite.sh`` runs ``kazoo/tests`` from the installed wheel with
``tests/kazoo_suite/plugin.py`` in place of kazoo's Java harness, in the venv
``scripts/install.sh`` makes (``.kazoo-venv``: the suite pins pyOpenSSL and
cryptography below what this environment has). Against ZooKeeper 3.8.0 here
the same suite gives 490 passed, 3 skipped; the acceptance: every test that
passes against ZooKeeper passes against zabd, except those in ``EXCEPTED``
(none now), which are not run, each with its reason (docs/zookeeper.md).
"""

from __future__ import annotations

import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".kazoo-venv" / "bin" / "python"
# class of kazoo's tests -> why zabd does not pass it (yet); the SASL DIGEST-MD5 classes were here until
# zabd served SASL (TestSASLGSSAPIAuthentication skips itself without a Kerberos test environment, on both)
EXCEPTED: dict[str, str] = {}

pytestmark = pytest.mark.skipif(not VENV_PYTHON.exists(), reason="run bash scripts/install.sh (makes .kazoo-venv)")


# kazoo's tests that read, through one server, what another client wrote through
# another, without a sync: ZooKeeper promises no such read (a follower may not have
# applied the write yet), and on a loaded machine either server may be behind. A
# failure of one of these is run once more, alone; any other failure is a failure.
CROSS_SERVER_READS = {
    "test_lock_ephemeral": "client1 creates the lock node through its server and stops; the suite's own client "
                           "gets it at once through its own server",
}


def _run_suite(tmp_path: Path, name: str, select: str | None) -> tuple[int, list[str], str]:
    report = tmp_path / f"{name}.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZABD_")}
    env |= {"PYTHON": str(VENV_PYTHON), "KAZOO_SUITE_DIR": str(tmp_path / f"servers-{name}")}
    args = ["bash", str(ROOT / "scripts" / "kazoo_suite.sh"), f"--junitxml={report}"]
    if select is not None:
        args += ["-k", select]
    proc = subprocess.run(args,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    passed, failed = 0, []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{case.get('classname')}::{case.get('name')}")
        else:
            passed += 1
    return passed, failed, proc.stdout[-3000:]


def test_kazoos_own_suite_passes_against_zabd(tmp_path: Path) -> None:
    # The excepted classes are not run: a test that fails in a background thread can fail whichever
    # test is running then (a SASL test's UnimplementedError once failed test_selectors_select's test_errno)
    select = "not (" + " or ".join(EXCEPTED) + ")" if EXCEPTED else None
    passed, failed, out = _run_suite(tmp_path, "suite", select)
    unexpected = [f for f in failed if f.split("::")[0].rsplit(".", 1)[-1] not in EXCEPTED]
    racy = sorted({f.rsplit("::", 1)[1] for f in unexpected} & CROSS_SERVER_READS.keys())
    if racy:
        print(f"kazoo tests that read another server's write without a sync failed, run again alone: {racy}")
        again, still, out2 = _run_suite(tmp_path, "again", " or ".join(racy))
        assert not still and again >= len(racy), "\n".join(still) + "\n" + out2
        unexpected = [f for f in unexpected if f.rsplit("::", 1)[1] not in CROSS_SERVER_READS]
        passed += len(racy)
    assert not unexpected, "\n".join(unexpected) + "\n" + out
    assert passed >= 480, (passed, failed)


def test_kazoos_sasl_tests_pass_against_zabd(tmp_path: Path) -> None:
    """kazoo's SASL DIGEST-MD5 classes alone (a quick look at what the whole suite runs too):
    the legacy auth_data form and sasl_options, the right and a wrong password."""
    passed, failed, out = _run_suite(tmp_path, "sasl", "SASLDigestAuthentication")
    assert not failed, "\n".join(failed) + "\n" + out
    assert passed == 4, out
