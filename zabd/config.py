"""Server configuration: a TOML file and/or ``ZABD_*`` environment variables.

Validated by one pydantic model. Every failure becomes a :class:`ConfigError`
whose message is one line naming the field, the value and what was expected,
because the operator reading it may be looking at a container's last log line.

The model is the one list of fields: the server's components get what they
need from it (``core_options()``, ``storage_options()``, ...), and the
launchers (``LocalCluster``, ``zabd cluster``, ``zabd compose``) write their
TOML and environment through ``to_toml``/``to_env``, so no key is typed twice.
It lives outside ``zabd.server`` because the client side writes configs too
and may not import the server.
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo

from zabd.codec.members import WILDCARDS, PeerSpec, parse_spec
from zabd.protocol.options import Options, for_server
from zabd.tls import tls_files_problem
from zabd.tokens import TokenFileError, load_tokens
from zabd.zk.jaas import JaasError, load_users

ENV_PREFIX = "ZABD_"
# ZABD_* variables that are not the server's config: the interpreter and core a
# process runs (ZABD_PURE, ZABD_PYTHON), a client's token, the TLS directory
# the compose files mount; a server started beside them must not refuse them
NOT_CONFIG = frozenset({"ZABD_PURE", "ZABD_PYTHON", "ZABD_TOKEN", "ZABD_TLS_DIR"})
DEFAULT_MAX_FRAME = 64 * 1024 * 1024

# ZooKeeper's four-letter words, as far as zk_4lw_whitelist may name them (the
# answers are zabd.server.zk.words'): the ones zabd answers, and every word
# ZooKeeper 3.8 knows (FourLetterCommands' table, less the telnet close bytes,
# which are not a word): a connection that opens with one is answered in text,
# even where zabd does not serve the word, so that a probe reads the same bytes
# from zabd as from ZooKeeper
FOUR_LETTER_WORDS = frozenset({"ruok", "srvr", "stat", "mntr", "conf", "envi", "cons", "wchs", "dirs", "isro"})
ZK_WORDS = FOUR_LETTER_WORDS | {"crst", "dump", "gtmk", "stmk", "srst", "wchc", "wchp", "hash"}
# ZooKeeper's 4lw.commands.whitelist when it is not set
DEFAULT_WHITELIST = ("srvr",)

# A field's marks (pydantic's json_schema_extra): SHOWN fields are what ZooKeeper's
# ``conf`` word prints (never a secret, such as the superuser digest, or a file path
# of a key); HIDDEN ones are test hooks no error message or listing offers.
SHOWN: dict[str, Any] = {"zabd_conf": True}
HIDDEN: dict[str, Any] = {"zabd_hidden": True}


class ConfigError(Exception):
    """A user mistake in the configuration; ``str()`` is the one-line message."""


def parse_hostport(value: str) -> tuple[str, int]:
    """``host:port`` -> ``(host, port)``; raises ValueError with what was expected."""
    host, sep, port_s = value.rpartition(":")
    if not sep or not host or not port_s.isdigit():
        raise ValueError("expected host:port")
    port = int(port_s)
    if not 1 <= port <= 65535:
        raise ValueError("expected host:port with a port in 1..65535")
    return host.strip("[]"), port


@dataclass(frozen=True, slots=True)
class StorageOptions:
    """What the storage backend is opened with (``zabd.server.storage_factory``)."""

    kind: Literal["memory", "disk"]
    data_dir: str
    fsync: bool
    segment_bytes: int
    window: int  # txns kept in memory: the core's window, so the log keeps what the core does


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """The background snapshots' rules (``zabd.server.snapshots``)."""

    snap_count: int
    retain: int  # snapshots kept; 0: never purge
    seed: int  # this node's: the nodes of a cluster do not all snapshot at once


@dataclass(frozen=True, slots=True)
class ZkOptions:
    """ZooKeeper's session layer's settings (``zabd.server.zk.expiry``)."""

    server_id: int
    tick_ms: int
    super_digest: str | None
    read_only: bool
    sasl_jaas: str | None
    sasl_super_user: str | None


class ServerConfig(BaseModel):
    """One replica's configuration. ``peers`` maps every node id of the
    ensemble (this node's included) to its quorum ``host:port``, or to
    ZooKeeper's server spec ``host:quorumport:electionport[:role][;[clienthost:]
    clientport]`` (``zabd.codec.members.parse_spec``)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    id: int = Field(ge=1, le=255, description="this node's id (1..n)", json_schema_extra=SHOWN)
    peers: dict[int, str] = Field(description="every node's quorum host:port or ZooKeeper server spec, this node's "
                                              "included", json_schema_extra=SHOWN)
    # ids of peers that are observers (ZooKeeper's observers): they follow the leader, hold
    # every txn and serve clients, but never vote, never count toward a quorum and never
    # lead. The same list on every node (env: '4,5').
    observers: list[int] = Field(default_factory=list)
    # true: this node starts outside the membership (peers lists the members and
    # this node): it waits to be added by a membership change (zabd reconfig)
    join: bool = False
    client: str = Field(description="client service host:port", json_schema_extra=SHOWN)
    data_dir: str = Field("data", json_schema_extra=SHOWN)
    tick_ms: int = Field(default=10, ge=1, le=10_000, json_schema_extra=SHOWN)
    # Election jitter is mix(seed ^ id ^ t): use one seed for the whole
    # cluster (per-node seeds such as base + id can cancel the id).
    seed: int = Field(default=0, ge=0, le=2**64 - 1)
    # disk: the durable log in data_dir (zabd/storage); memory keeps nothing across restarts
    storage: Literal["memory", "disk"] = Field("disk", json_schema_extra=SHOWN)
    # false: benchmarks only (a crash can lose acknowledged writes); warned at start
    fsync: bool = Field(True, json_schema_extra=SHOWN)
    # true: the leader's Broadcast(Propose) may leave while its own append syncs, as ZooKeeper's
    # leader does (a proposal acknowledges nothing; Commit and client answers still wait for the
    # sync). Off by default: every send that follows a persist waits for it ("persist before you speak").
    leader_early_propose: bool = False
    # kv: committed txns are applied to the key-value store (zabd/kv); none: the log is the state
    state_machine: Literal["kv", "none"] = "kv"
    # a background snapshot every snap_count/2 + rand(snap_count/2) applied txns (disk storage)
    snap_count: int = Field(default=100_000, ge=2, le=2**31, json_schema_extra=SHOWN)
    snap_retain: int = Field(default=3, ge=1, le=1000)  # snapshots kept; older ones and their log purged
    # true: after each snapshot, delete snapshots beyond snap_retain and the log
    # segments they cover (logged); false: keep everything (disk grows forever)
    autopurge: bool = True
    # committed txns kept in memory (older ones are read from the log on disk)
    history_window: int = Field(default=10_000, ge=16, le=10_000_000)
    # a follower further behind than this many txns gets a snapshot, not a diff
    diff_limit: int = Field(default=20_000, ge=1, le=100_000_000)
    # a sync plan not acknowledged within this is sent once more
    sync_retry_ms: int = Field(default=5000, ge=10, le=3_600_000)
    log_segment_bytes: int = Field(default=64 * 1024 * 1024, ge=4096, le=2**40)  # roll the log segment beyond this
    max_frame: int = Field(default=DEFAULT_MAX_FRAME, ge=1024, le=2**31)
    # Outbound bytes queued on one peer link before the link counts as broken
    # (a stopped follower must not grow the leader's memory without bound).
    max_link_buffer: int = Field(default=256 * 1024 * 1024, ge=1024)
    # ZooKeeper's limits on both client ports (zabd.server.limits): connections from one address
    # on each port (maxClientCnxns; 0: no limit); connections in all (maxCnxns; 0: what the
    # descriptor limit leaves); the largest request on zabd's port (jute.maxbuffer; ZooKeeper's
    # port takes zk_max_data); the time to send a frame once begun, or a ConnectRequest once
    # connected (sessionlessCnxnTimeout); answers queued to one connection that does not read
    # them, and to all; bytes of frames begun and not finished, all connections together
    max_client_cnxns: int = Field(default=60, ge=0, le=1_000_000)
    max_cnxns: int = Field(default=0, ge=0, le=10_000_000)
    # connections the kernel completes and queues on each client port before this server accepts
    # them (ZooKeeper's clientPortListenBacklog; the kernel caps it at net.core.somaxconn): when
    # a server dies, all its clients dial the others at once, and a connect past a full queue is
    # dropped, which the client sees only when its dial times out (go-zookeeper's 1 s)
    client_backlog: int = Field(default=4096, ge=1, le=65535)
    client_max_frame: int = Field(default=1 << 20, ge=1024, le=2**31)
    client_frame_timeout_ms: int = Field(default=10_000, ge=10, le=3_600_000)
    client_max_queued: int = Field(default=32 << 20, ge=1 << 16, le=2**40)
    client_max_queued_total: int = Field(default=256 << 20, ge=1 << 16, le=2**42)
    client_max_buffered_total: int = Field(default=256 << 20, ge=1 << 16, le=2**42)
    # Proposals the leader keeps uncommitted at once; more wait in a queue in
    # front of the core (the core's commit step scans its pending acks).
    max_inflight: int = Field(default=256, ge=1, le=1_000_000)
    connect_grace_ms: int = Field(default=1000, ge=0, le=60_000)
    # Peer links are kept honest by the driver: a link idle for peer_ping_ms
    # gets a PING frame, and one on which nothing arrived for peer_silence_ms
    # is closed and redialed. A partition that drops packets (no RST) would
    # otherwise leave both ends waiting on TCP's retransmission backoff for
    # many seconds after it heals (ZooKeeper's learner sockets have read
    # timeouts for the same reason). A dial that has not connected within
    # peer_connect_timeout_ms is abandoned and tried again.
    peer_ping_ms: int = Field(default=250, ge=10, le=60_000)
    peer_silence_ms: int = Field(default=1500, ge=50, le=600_000)
    peer_connect_timeout_ms: int = Field(default=500, ge=10, le=60_000)
    # host:port of the admin HTTP port (/health, /status, /metrics); empty: off
    admin: str = ""
    # host:port of ZooKeeper's client port (its jute protocol: kazoo, zkCli,
    # ZooKeeper's Java client) on the same tree; empty: off
    zookeeper: str = Field("", json_schema_extra=SHOWN)
    # host:port of a TLS ZooKeeper port beside it (ZooKeeper's secureClientPort), with
    # the tls_ca/tls_cert/tls_key files and tls_client_certs; empty: off
    zookeeper_secure: str = ""
    # ZooKeeper's readonlymode.enabled: a node cut off from a quorum serves
    # reads to clients that ask for read-only (their sessions are this node's
    # alone; writes get NotReadOnly; they move when the quorum is back)
    zk_read_only: bool = Field(False, json_schema_extra=SHOWN)
    # TLS (off by default): PEM files of the cluster's CA, this node's
    # certificate (its subjectAltName must hold zabd-node-<id>) and key.
    # tls_peer: mutual TLS between nodes, each side checking the other's id;
    # tls_client: TLS on the client ports (zabd's and ZooKeeper's), asking
    # clients for a certificate as tls_client_certs says (a verified one is a
    # read-write identity).
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_peer: bool = False
    tls_client: bool = False
    tls_client_certs: Literal["none", "optional", "required"] = "none"
    # a file of client tokens, one "TOKEN ro|rw|admin" a line: when set, a
    # client must authenticate (a token, or a verified client certificate)
    # before anything is served; ro tokens may only read, admin ones also read
    # ZooKeeper txns in the log and change the membership (zabd.server.auth)
    auth_tokens_file: str = ""
    # client certificates that name one of these (a subjectAltName DNS entry,
    # as `zabd certs` writes zabd-client-<j>) get the admin role; any other
    # verified one is rw (env: 'zabd-client-1,ops')
    tls_admin_names: list[str] = Field(default_factory=list)
    # a storage flush slower than this is logged as a warning (and counted in /metrics)
    slow_fsync_ms: int = Field(default=1000, ge=1, le=600_000)
    # ZooKeeper's data model (zabd/zk): session timeouts are negotiated
    # between 2 and 20 zk_tick_ms (ZooKeeper's tickTime); znode data is at most
    # zk_max_data bytes (jute.maxbuffer); zk_super_digest ("super:<base64 sha1>",
    # from zabd.zk.acl.digest_id) is a superuser who passes every ACL
    zk_tick_ms: int = Field(default=2000, ge=10, le=60_000, json_schema_extra=SHOWN)
    zk_max_data: int = Field(default=1 << 20, ge=1, le=1 << 30, json_schema_extra=SHOWN)
    zk_super_digest: str = ""
    # SASL DIGEST-MD5 on ZooKeeper's port (kazoo's sasl_options, the Java client's JAAS Client
    # section): a JAAS file whose Server section holds the users, as ZooKeeper's
    # java.security.auth.login.config does (user_<name>="<password>"; read at start); empty: a
    # SASL token is answered AUTH_FAILED. A SASL user's id is sasl:<name>; zk_sasl_super_user
    # (ZooKeeper's zookeeper.superUser) names the one that is also a superuser
    zk_sasl_jaas: str = ""
    zk_sasl_super_user: str = ""
    # ZooKeeper's 4lw.commands.whitelist: the four-letter words its client port
    # answers (a list, or ZooKeeper's comma-separated string; env: 'srvr,mntr').
    # "*" is every word; srvr is always answered, and isro when zk_read_only is
    # on, as in ZooKeeper; any other word gets ZooKeeper's refusal. The default
    # is ZooKeeper's: cons/stat (client addresses, session ids), conf/envi/dirs
    # (data directory, host) and mntr stay closed until they are listed.
    zk_4lw_whitelist: list[str] = Field(default_factory=lambda: list(DEFAULT_WHITELIST), json_schema_extra=SHOWN)
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    # Test hook, offered nowhere: "ack_leader" makes the server SIGKILL itself right after
    # an AckLeader frame was queued for its socket (tests/durable/test_persist_order.py);
    # "snap_piece" right after a piece of a SNAP's snapshot went to its file, the state
    # half built (tests/server/test_snap_stream.py)
    test_crash_after: Literal["", "ack_leader", "snap_piece"] = Field("", json_schema_extra=HIDDEN)

    @field_validator("zk_super_digest")
    @classmethod
    def _super_digest(cls, value: str) -> str:
        if value and len(value.split(":")) != 2:
            raise ValueError("expected user:base64(sha1(user:password)), as zabd.zk.acl.digest_id makes it")
        return value

    @field_validator("zk_4lw_whitelist", mode="before")
    @classmethod
    def _4lw_split(cls, value: Any) -> Any:
        # ZooKeeper's form, "srvr, mntr", in TOML or the environment; blanks are skipped, as ZooKeeper skips them
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list):
            return [w.strip() if isinstance(w, str) else w for w in value if not (isinstance(w, str) and not w.strip())]
        return value

    @field_validator("zk_4lw_whitelist")
    @classmethod
    def _4lw_words(cls, value: list[str]) -> list[str]:
        expected = f"expected some of {', '.join(sorted(FOUR_LETTER_WORDS))}, or '*'"
        for word in value:
            if word in ZK_WORDS and word not in FOUR_LETTER_WORDS:
                raise ValueError(f"{word!r} is a ZooKeeper word zabd does not answer; {expected}")
            if word != "*" and word not in FOUR_LETTER_WORDS:
                raise ValueError(f"{word!r} is not a four-letter word; {expected}")
        return value

    @field_validator("peers", mode="before")
    @classmethod
    def _peer_keys(cls, value: Any) -> Any:
        # TOML table keys are strings; the environment form gives strings too.
        if not isinstance(value, dict):
            return value
        out: dict[Any, Any] = {}
        for key, addr in value.items():
            if isinstance(key, str):
                if not key.isdigit():
                    raise ValueError(f"peer id {key!r} is not a node id; expected an integer 1..255")
                key = int(key)
            out[key] = addr
        return out

    @field_validator("peers")
    @classmethod
    def _peers_valid(cls, value: dict[int, str]) -> dict[int, str]:
        if not value:
            raise ValueError("expected at least one node")
        seen: dict[tuple[str, int], int] = {}
        for node_id in sorted(value):
            addr = value[node_id]
            if not 1 <= node_id <= 255:
                raise ValueError(f"peer id {node_id} out of range; expected 1..255")
            try:
                spec = parse_spec(addr)
            except ValueError as exc:
                raise ValueError(f"peers.{node_id} = {addr!r}: {exc}") from None
            for port in (spec.quorum, spec.election):
                if port is None:
                    continue
                hp = (spec.host, port)
                if hp in seen:
                    raise ValueError(f"peers.{node_id} = {addr!r}: duplicate address {spec.host}:{port}, already "
                                     f"used by node {seen[hp]}")
                seen[hp] = node_id
        # ids may have gaps: members come and go (zabd reconfig)
        return value

    @field_validator("client")
    @classmethod
    def _client_valid(cls, value: str) -> str:
        parse_hostport(value)
        return value

    @field_validator("admin", "zookeeper", "zookeeper_secure")
    @classmethod
    def _admin_valid(cls, value: str) -> str:
        if value:
            parse_hostport(value)
        return value

    @model_validator(mode="after")
    def _tls_files(self) -> ServerConfig:
        if self.tls_peer or self.tls_client or self.zookeeper_secure:
            for name in ("tls_ca", "tls_cert", "tls_key"):
                path = getattr(self, name)
                if not path:
                    raise ValueError(
                        f"field {name!r} is missing; tls_peer/tls_client/zookeeper_secure need a CA, a certificate "
                        "and a key"
                    )
                if not os.access(path, os.R_OK):
                    raise ValueError(f"field {name!r} = {path!r}: cannot read the file")
            # a bad file is a config error now, not a failure after recovery
            if problem := tls_files_problem(self.tls_ca, self.tls_cert, self.tls_key):
                raise ValueError(problem)
        if self.tls_admin_names and self.tls_client_certs == "none":
            raise ValueError(f"field 'tls_admin_names' = {self.tls_admin_names}: needs tls_client_certs = "
                             "\"optional\" or \"required\" (no certificate is asked for)")
        if self.tls_client_certs != "none" and not (self.tls_client or self.zookeeper_secure):
            raise ValueError(f"field 'tls_client_certs' = {self.tls_client_certs!r}: needs tls_client = true")
        if self.auth_tokens_file and not os.access(self.auth_tokens_file, os.R_OK):
            raise ValueError(f"field 'auth_tokens_file' = {self.auth_tokens_file!r}: cannot read the file")
        if self.auth_tokens_file:
            try:
                load_tokens(self.auth_tokens_file)
            except (TokenFileError, UnicodeDecodeError) as exc:
                raise ValueError(f"field 'auth_tokens_file': {exc}") from None
        if self.zk_sasl_jaas:
            try:
                users = load_users(self.zk_sasl_jaas)
            except JaasError as exc:
                raise ValueError(f"field 'zk_sasl_jaas': {exc}") from None
            if self.zk_sasl_super_user and self.zk_sasl_super_user not in users:
                raise ValueError(f"field 'zk_sasl_super_user' = {self.zk_sasl_super_user!r}: no such user in "
                                 f"zk_sasl_jaas ({self.zk_sasl_jaas}); expected one of {', '.join(sorted(users))}")
        elif self.zk_sasl_super_user:
            raise ValueError(f"field 'zk_sasl_super_user' = {self.zk_sasl_super_user!r}: needs zk_sasl_jaas (the "
                             "JAAS file of the SASL users)")
        return self

    @model_validator(mode="after")
    def _cross_checks(self) -> ServerConfig:
        if self.peer_silence_ms < 2 * self.peer_ping_ms:
            raise ValueError(
                f"field 'peer_silence_ms' = {self.peer_silence_ms}: must be at least twice "
                f"peer_ping_ms ({self.peer_ping_ms}), or an idle but healthy link is closed"
            )
        if self.id not in self.peers:
            raise ValueError(f"field 'id' = {self.id}: own id absent from peers; expected one of {sorted(self.peers)}")
        strangers = sorted(set(self.observers) - set(self.peers))
        if strangers:
            raise ValueError(f"field 'observers' = {self.observers}: {strangers} not in peers; expected ids of "
                             f"{sorted(self.peers)}")
        if len(set(self.observers)) != len(self.observers):
            raise ValueError(f"field 'observers' = {self.observers}: an id is listed twice")
        for node_id in self.observers:
            if self.peer_spec(node_id).role == "participant":
                raise ValueError(f"field 'observers' = {self.observers}: peers.{node_id} = "
                                 f"{self.peers[node_id]!r} says participant; expected one role for a node")
        if self.observer_ids >= set(self.peers):
            raise ValueError(f"field 'observers' = {self.observers}: every node would be an observer; "
                             "expected at least one voter")
        own = self.peer_spec(self.id)
        if self.zookeeper and own.client_port is not None:
            zhost, zport = parse_hostport(self.zookeeper)
            # ZooKeeper's rule (QuorumPeerConfig.setupClientPort): a wildcard listens on the port named
            if zport != own.client_port or (zhost not in WILDCARDS and zhost != own.client_host):
                raise ValueError(f"field 'zookeeper' = {self.zookeeper!r}: peers.{self.id} = "
                                 f"{self.peers[self.id]!r} gives this node's client address as {own.client_addr}; "
                                 "expected the same address (or a wildcard host and the same port), or one left out")
        client = parse_hostport(self.client)
        taken = (client, *self._peer_ports())
        if self.admin and parse_hostport(self.admin) in taken:
            raise ValueError(f"field 'admin' = {self.admin!r}: the port is already the client or a peer port")
        zk = self.zookeeper_addr
        if zk and zk in (*taken, *([self.admin_addr] if self.admin else [])):
            raise ValueError(f"field 'zookeeper' = {self.zookeeper_listen!r}: the port is already the client, "
                             "admin or a peer port")
        for node_id in self.peers:
            if client in self._peer_ports(node_id):
                raise ValueError(
                    f"field 'client' = {self.client!r}: duplicate port, peers.{node_id} uses it; "
                    "expected a free host:port"
                )
        return self

    def _peer_ports(self, node_id: int | None = None) -> list[tuple[str, int]]:
        """The quorum and election (host, port) of one node, or of all."""
        out = []
        for n in self.peers if node_id is None else [node_id]:
            spec = self.peer_spec(n)
            out += [(spec.host, p) for p in (spec.quorum, spec.election) if p is not None]
        return out

    # ------------------------------------------- what each component is handed

    def core_options(self) -> Options:
        """The protocol core's rules: the server's variant with this node's
        window (txns kept in memory), DIFF limit and sync retry in ticks.
        Storage keeps the same window (``open_storage`` reads it from here)."""
        return for_server(self.history_window, self.diff_limit, max(1, self.sync_retry_ms // self.tick_ms))

    def storage_options(self) -> StorageOptions:
        return StorageOptions(self.storage, self.data_dir, self.fsync, self.log_segment_bytes,
                              self.core_options().window)

    def snapshot_options(self) -> SnapshotOptions:
        seed = self.seed ^ (self.id * 0x9E3779B97F4A7C15 & 0xFFFF_FFFF_FFFF_FFFF)
        return SnapshotOptions(self.snap_count, self.snap_retain if self.autopurge else 0, seed)

    def zk_options(self) -> ZkOptions:
        return ZkOptions(self.id, self.zk_tick_ms, self.zk_super_digest or None, self.zk_read_only,
                         self.zk_sasl_jaas or None, self.zk_sasl_super_user or None)

    def conf_view(self) -> dict[str, Any]:
        """What ZooKeeper's ``conf`` word shows: the SHOWN fields, ``zookeeper``
        as this node listens (taken from its spec when the field is empty)."""
        conf = {name: getattr(self, name) for name in SHOWN_FIELDS}
        conf["zookeeper"] = self.zookeeper_listen
        return conf

    # ------------------------------------------------- what launchers write

    def to_toml(self) -> str:
        """The TOML file of the fields given (not those left at their default):
        ``load_config`` reads it back to an equal config."""
        return to_toml(self.model_dump(exclude_unset=True))

    def to_env(self) -> dict[str, str]:
        """The ``ZABD_*`` variables of the fields given; ``load_config`` reads them back."""
        return to_env(self.model_dump(exclude_unset=True))

    # --------------------------------------------------------------- helpers

    @property
    def peer_ids(self) -> list[int]:
        return sorted(i for i in self.peers if i != self.id)

    def peer_spec(self, node_id: int) -> PeerSpec:
        return parse_spec(self.peers[node_id])

    def peer_addr(self, node_id: int) -> tuple[str, int]:
        """A node's quorum (host, port): the one its peers dial."""
        spec = self.peer_spec(node_id)
        return spec.host, spec.quorum

    @property
    def quorum_addresses(self) -> dict[int, str]:
        """Every node's quorum ``host:port`` (what the transport dials)."""
        return {n: self.peer_spec(n).quorum_addr for n in self.peers}

    @property
    def election_addr(self) -> tuple[str, int] | None:
        """This node's election (host, port), if its spec names one: it
        accepts the same peer links there as on its quorum port."""
        spec = self.peer_spec(self.id)
        return None if spec.election is None else (spec.host, spec.election)

    @property
    def observer_ids(self) -> frozenset[int]:
        """``observers`` and the nodes whose spec says ``observer``."""
        return frozenset(self.observers) | {n for n in self.peers if self.peer_spec(n).role == "observer"}

    @property
    def client_addr(self) -> tuple[str, int]:
        return parse_hostport(self.client)

    @property
    def admin_addr(self) -> tuple[str, int] | None:
        return parse_hostport(self.admin) if self.admin else None

    @property
    def zookeeper_listen(self) -> str:
        """``host:port`` of ZooKeeper's client port: ``zookeeper``, else the
        client address of this node's spec (as ZooKeeper takes clientPort from
        its dynamic config), else "" (off)."""
        return self.zookeeper or self.peer_spec(self.id).client_addr or ""

    @property
    def zookeeper_addr(self) -> tuple[str, int] | None:
        listen = self.zookeeper_listen
        return parse_hostport(listen) if listen else None

    @property
    def zookeeper_secure_addr(self) -> tuple[str, int] | None:
        return parse_hostport(self.zookeeper_secure) if self.zookeeper_secure else None


FIELDS = ServerConfig.model_fields


def _marked(info: FieldInfo, mark: dict[str, Any]) -> bool:
    extra = info.json_schema_extra
    return isinstance(extra, dict) and all(extra.get(k) == v for k, v in mark.items())


SHOWN_FIELDS = tuple(name for name, info in FIELDS.items() if _marked(info, SHOWN))
# the fields error messages offer (test hooks left out)
OFFERED = tuple(name for name, info in FIELDS.items() if not _marked(info, HIDDEN))


def _expected(field: str) -> str:
    info = FIELDS.get(field)
    if info is None:
        return f"one of the fields {', '.join(OFFERED)}"
    ann = info.annotation
    if field == "zk_4lw_whitelist":
        return "a list of four-letter words or '*' (env: 'srvr,mntr')"
    if field == "peers":
        return ("a table of node id -> 'host:port' or 'host:quorumport:electionport[:role][;[clienthost:]clientport]' "
                "(env: '1=host:port,2=host:port')")
    if field == "observers":
        return "a list of node ids (env: '4,5')"
    if ann == list[str]:
        return "a list of strings (env: comma-separated)"
    if ann is int:
        return "an integer"
    if ann is bool:
        return "true or false"
    if ann is str:
        return "a string"
    return str(ann).replace("typing.", "")


def parse_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """``ZABD_*`` variables -> typed values (the strings a container passes)."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name in NOT_CONFIG:
            continue
        field = name[len(ENV_PREFIX) :].lower()
        if field not in FIELDS:
            raise ConfigError(f"config error: {name} = {raw!r}: unknown field; expected one of {_env_names()}")
        ann = FIELDS[field].annotation
        try:
            if field == "peers":
                out[field] = _parse_env_peers(raw)
            elif field == "observers":
                parts = [p.strip() for p in raw.split(",") if p.strip()]
                if not all(p.isdigit() for p in parts):
                    raise ValueError
                out[field] = [int(p) for p in parts]
            elif ann == list[str]:
                out[field] = [p.strip() for p in raw.split(",") if p.strip()]
            elif ann is int:
                if not raw.strip().isdigit():
                    raise ValueError
                out[field] = int(raw)
            elif ann is bool:
                low = raw.strip().lower()
                if low in ("1", "true", "yes", "on"):
                    out[field] = True
                elif low in ("0", "false", "no", "off"):
                    out[field] = False
                else:
                    raise ValueError
            else:
                out[field] = raw
        except ValueError:
            raise ConfigError(f"config error: {name} = {raw!r}: expected {_expected(field)}") from None
    return out


def _env_names() -> str:
    return ", ".join(env_name(f) for f in OFFERED)


def env_name(field: str) -> str:
    return ENV_PREFIX + field.upper()


def _parse_env_peers(raw: str) -> dict[str, str]:
    peers: dict[str, str] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, addr = item.partition("=")
        if not sep:
            raise ValueError
        if key.strip() in peers:
            raise ConfigError(f"config error: ZABD_PEERS = {raw!r}: node {key.strip()} listed twice")
        peers[key.strip()] = addr.strip()
    return peers


def format_validation_error(exc: ValidationError, data: Mapping[str, Any]) -> str:
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    field = loc[0] if loc else ""
    msg = str(err["msg"]).removeprefix("Value error, ")
    kind = err["type"]
    if not field:  # model-level check
        return f"config error: {msg}"
    name = ".".join(loc)
    if kind == "missing":
        return f"config error: field {name!r} is missing; expected {_expected(field)}"
    if kind == "extra_forbidden":
        return f"config error: field {name!r} = {err['input']!r}: unknown field; expected one of {', '.join(OFFERED)}"
    value = data.get(field, err.get("input"))
    if field == "peers" and msg.startswith(("peers.", "missing peer", "peer id", "expected")):
        return f"config error: field 'peers' = {value!r}: {msg}"
    if kind.endswith("_type") or kind in ("int_from_float", "literal_error"):
        expected = msg if kind == "literal_error" else _expected(field)
        expected = expected.removeprefix("Input should be ")
        return f"config error: field {name!r} = {err['input']!r}: wrong type or value; expected {expected}"
    return f"config error: field {name!r} = {err['input']!r}: {msg}"


def load_config(path: str | Path | None, environ: Mapping[str, str] | None = None) -> ServerConfig:
    """Read ``path`` (optional) and overlay ``ZABD_*`` variables; validate."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as f:
                data = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"config error: --config {str(path)!r}: cannot read ({exc.strerror})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config error: --config {str(path)!r}: not valid TOML ({exc})") from None
    data.update(parse_env(os.environ if environ is None else environ))
    try:
        return ServerConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, data)) from None


def _field(name: str) -> FieldInfo:
    info = FIELDS.get(name)
    if info is None:  # a launcher's typo: a program error, not a user's
        raise KeyError(f"{name!r} is not a ServerConfig field")
    return info


def env_value(name: str, value: Any) -> str:
    """``value`` of field ``name`` as ``parse_env`` reads it back."""
    _field(name)
    if name == "peers":
        return ",".join(f"{node_id}={addr}" for node_id, addr in value.items())
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def to_env(values: Mapping[str, Any]) -> dict[str, str]:
    """Field values -> ``ZABD_*`` variables, in the order given."""
    return {env_name(name): env_value(name, value) for name, value in values.items()}


def toml_value(name: str, value: Any) -> str:
    """``value`` of field ``name`` as TOML (not ``peers``: a table of its own)."""
    _field(name)
    if isinstance(value, bool):  # before int: bool is an int, and TOML spells it lowercase
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    # JSON's strings and arrays of strings or integers are TOML's too
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def to_toml(values: Mapping[str, Any]) -> str:
    """Field values -> a TOML config file, in the order given, ``peers`` last
    (a table: every key after its header belongs to it)."""
    lines = [f"{name} = {toml_value(name, value)}" for name, value in values.items() if name != "peers"]
    if "peers" in values:
        _field("peers")
        lines.append("[peers]")
        lines += [f"{node_id} = {json.dumps(addr)}" for node_id, addr in values["peers"].items()]
    return "\n".join(lines) + "\n"
