"""The cheap probes of the abuse suite (``zabd.nemesis.abuse``) against real
zabd servers, in the default run: nothing forged, nothing crashed, nothing
read, no session hijacked, and the well-behaved client served throughout.
Outcomes only: never a rate or a latency (the bench, ``bench/abuse.py``,
prints those side by side with ZooKeeper).

One plaintext cluster serves every probe but the role checks, which need
TLS and tokens. Counts are small (200 connections from one address, 20
stalled frames) and the frame deadline short (1.5 s), so the whole file
takes well under a minute.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kazoo")

from zabd.nemesis.abuse import (
    PROBES,
    WORDS,
    ClientRun,
    Params,
    Row,
    idle_run,
    java_random_bytes,
    password_like,
    run_probe,
    zookeeper_password,
)
from zabd.nemesis.abuse_target import ZabdTarget

FRAME_TIMEOUT_MS = 1500
PARAMS = Params.cheap()

# The four-letter-word whitelist and the READ check at a watch's trigger are
# being made in parallel with this suite; until they land on this branch,
# these two probes see zabd answer every word and deliver the events.


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZabdTarget, ClientRun]]:
    """3 nodes, disk storage, the default config but a short frame deadline
    (``max_client_cnxns`` left at 60); the well-behaved client's idle run."""
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    t = ZabdTarget(base=Path(tmp_path_factory.mktemp("abuse")), extra={"client_frame_timeout_ms": FRAME_TIMEOUT_MS})
    t.start()
    try:
        yield t, idle_run(t, PARAMS)
    finally:
        t.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ZabdTarget, ClientRun]]:
    t = ZabdTarget(base=Path(tmp_path_factory.mktemp("abuse-tls")), tls=True, client_certs="optional")
    t.start()
    try:
        yield t, idle_run(t, PARAMS)
    finally:
        t.stop()


def _run(target: tuple[ZabdTarget, ClientRun], name: str) -> Row:
    t, idle = target
    row = run_probe(t, PROBES[name], PARAMS, idle)
    assert row.applies
    # every node alive and serving, the well-behaved client never failed
    assert row.up, (row.did, t.serving())
    assert row.client is not None and row.client["errors"] == 0 and row.client["ops"] > 0, row.client
    return row


def test_zookeepers_password_is_derived_from_the_session_id_as_java_does() -> None:
    # new java.util.Random(42).nextBytes(new byte[16]), as OpenJDK 17 printed it
    assert java_random_bytes(42, 16) == bytes.fromhex("359d41baf78afe0de1bbe7ae28c0450c")
    # the password ZooKeeper 3.8.0 gave session 0x100001fcaaf0000 (kazoo's client_id)
    assert zookeeper_password(0x100001FCAAF0000) == bytes.fromhex("23f2b4f574bc6f8e3941d403dd432778")


def test_password_like_values_are_found_behind_their_length_headers() -> None:
    pw, digest = bytes(range(16)), bytes(range(32))
    blob = b"junk\xc4\x10" + pw + b"more\xc4\x20" + digest + b"\x00\x00\x00\x10" + pw[::-1]
    assert password_like(blob, 10) == [pw, digest, pw[::-1]]


def test_a_forged_propose_is_committed_raw_and_applies_nothing(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "forged-propose")
    assert row.ok, row.did
    assert all(kind == ["raw", True] for kind in row.details["kinds"].values()), row.details["kinds"]
    assert row.details["kv"] is None
    assert row.details["znode_after"] == {i: row.details["znode_before"] for i in (1, 2, 3)}


def test_a_forged_txn_for_a_digest_only_znode_changes_no_replica(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "forged-acl")
    assert row.ok, row.details
    assert {r["data"] for r in row.details["replicas"].values()} == {"secret-v1"}


def test_the_log_read_without_a_token_holds_no_zookeeper_txn_or_secret(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "log-read")
    assert row.ok, row.did
    assert "zk" not in row.details["kinds"] and row.details["leaked"] == []


def test_no_password_an_attacker_can_find_or_derive_opens_the_victims_session(
        plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "hijack")
    assert row.ok, row.details
    d = row.details
    assert d["owner_is_session"] and d["live"] == [] and d["victim_connected"] and d["ephemeral_on"] == [True] * 3
    assert not d["derived_is_password"]  # zabd's passwords are random, not ZooKeeper's Random(id ^ secret)


def test_connections_from_one_address_are_capped_on_both_ports(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "conns-per-address")
    assert row.ok, row.did
    for port in ("client", "zookeeper"):
        assert 0 < row.details[port]["held_by_server"] <= 60, row.details


def test_stalled_frames_are_all_closed_at_the_deadline(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "stalled-frames")
    assert row.ok, row.did
    for port in ("client", "zookeeper"):
        d = row.details[port]
        assert d["still_open"] == 0 and d["closed_early"] + d["closed_by_deadline"] == PARAMS.stalled, d


def test_four_letter_words_follow_zookeepers_default_whitelist(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "four-letter-words")
    words = row.details["words"]
    assert sorted(words) == sorted(WORDS)
    # ZooKeeper 3.8 with its default whitelist answers srvr, and says so of every other word
    assert [w for w in WORDS if words[w]["answered"]] == ["srvr"], row.did
    assert all("not in the whitelist" in words[w]["first_line"] for w in WORDS if w != "srvr"), words


def test_no_watch_event_for_a_node_the_watcher_may_no_longer_read(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "watch-acl")
    for kind in ("persistent", "recursive"):  # the watches were live while the node was world-readable
        assert row.details[kind]["control"], row.details
    assert all(not v["after_acl"] for v in row.details.values()), row.did


def test_sasl_guesses_replays_and_strangers_get_nothing(plain: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(plain, "sasl")
    assert row.ok, row.did
    d = row.details
    assert d["got_in"] == [] and d["real"] == "ok" and d["stranger"] == "AUTH_FAILED"
    assert not any(k.endswith(("not closed", ": ok")) for k in d["counts"]), d["counts"]
    assert d["counts"]["guess: AUTH_FAILED"] > 0 and d["counts"]["replay: AUTH_FAILED"] > 0
    assert d["counts"]["null: closed"] > 0  # ZooKeeper's: no answer to a null token


def test_roles_on_a_tls_cluster_with_tokens(tls: tuple[ZabdTarget, ClientRun]) -> None:
    row = _run(tls, "tls-tokens")
    d = row.details
    assert d["ro"]["propose"].startswith("refused") and d["ro"]["zk_txns"] == 0
    assert d["rw"]["propose"].startswith("zxid") and d["rw"]["zk_txns"] == 0
    assert d["admin"]["zk_txns"] > 0
    assert d["none"] == "refused: unauthorized" and d["wrong"] == "refused: unauthorized"
    assert d["zk port without certificate"] == "refused"
    assert row.ok
