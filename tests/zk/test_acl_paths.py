"""ACLs and paths as ZooKeeper 3.8 defines them: digest ids
(``DigestAuthenticationProvider``), ``fixupACL`` (``PrepRequestProcessor``),
``checkACL`` (``ZooKeeperServer``), ip matching (``IPAuthenticationProvider``)
and ``PathUtils.validatePath``."""

from __future__ import annotations

import base64
import hashlib

import pytest

from zabd.zk import acl as acls
from zabd.zk import paths
from zabd.zk.acl import (
    ACL,
    ADMIN,
    ALL,
    ANYONE,
    CREATE,
    CREATOR_ALL_ACL,
    DELETE,
    OPEN_ACL_UNSAFE,
    READ,
    READ_ACL_UNSAFE,
    SUPER,
    WRITE,
    Id,
)
from zabd.zk.errors import Code, ZKError


def sha1_b64(text: str) -> str:
    """Computed here, independently of zabd: base64(sha1(text))."""
    return base64.b64encode(hashlib.sha1(text.encode()).digest()).decode()


ALICE = Id("digest", "alice:" + sha1_b64("alice:secret"))
BOB = Id("digest", "bob:" + sha1_b64("bob:pw"))


def fixup_code(acl: tuple[ACL, ...], auth: tuple[Id, ...] = ()) -> Code:
    try:
        acls.fixup("/p", auth, acl)
    except ZKError as exc:
        return exc.code
    return Code.OK


# ------------------------------------------------------------- permissions


def test_permission_bits_are_zookeepers() -> None:
    # ZooDefs.Perms
    assert (READ, WRITE, CREATE, DELETE, ADMIN) == (1, 2, 4, 8, 16)
    assert ALL == 31
    assert (ACL(31, Id("world", "anyone")),) == OPEN_ACL_UNSAFE
    assert (ACL(1, Id("world", "anyone")),) == READ_ACL_UNSAFE
    assert (ACL(31, Id("auth", "")),) == CREATOR_ALL_ACL


# ------------------------------------------------------------------ digests


def test_digest_id_of_super_test_is_zookeepers_known_value() -> None:
    # DigestAuthenticationProvider.generateDigest("super:test"), the value
    # ZooKeeper's own pom.xml and tests configure as superDigest
    assert acls.digest_id("super", "test") == "super:D/InIHSb7yEEbrWz8b9l71RjZJU="
    assert acls.digest_id("super", "test") == "super:" + sha1_b64("super:test")


@pytest.mark.parametrize(
    ("user", "password"),
    [("alice", "secret"), ("bob", ""), ("", "pw"), ("ünï", "cödé"), ("u", "pass:with:colons")],
)
def test_digest_id_is_user_and_base64_sha1_of_user_colon_password(user: str, password: str) -> None:
    assert acls.digest_id(user, password) == f"{user}:{sha1_b64(f'{user}:{password}')}"


def test_digest_auth_proves_the_digest_id() -> None:
    assert acls.digest_auth("alice:secret") == (ALICE,)


def test_digest_auth_splits_at_the_first_colon_as_generate_digest_does() -> None:
    # generateDigest hashes the whole "user:pass:word" and keeps parts[0] of split(":", 2)
    assert acls.digest_auth("u:pass:word") == (Id("digest", "u:" + sha1_b64("u:pass:word")),)


def test_digest_auth_adds_super_when_the_digest_is_the_superdigest() -> None:
    sup = "super:" + sha1_b64("super:test")
    ids = acls.digest_auth("super:test", super_digest=sup)
    assert set(ids) == {SUPER, Id("digest", sup)}
    # a wrong password proves only its own digest
    assert acls.digest_auth("super:nope", super_digest=sup) == (Id("digest", "super:" + sha1_b64("super:nope")),)
    # no superDigest configured: nobody is super
    assert SUPER not in acls.digest_auth("super:test")


# ZooKeeper's DigestAuthenticationProvider.handleAuthentication never fails: generateDigest('alice')
# hashes the whole string (DigestAuthenticationProvider.java 118-122, 178-190). (Found by these tests;
# zabd answered AUTH_FAILED before fe81526.)
def test_digest_auth_without_colon_is_accepted_like_zookeeper() -> None:
    assert acls.digest_auth("alice") == (Id("digest", "alice:" + sha1_b64("alice")),)


# -------------------------------------------------------------------- fixup


def test_fixup_keeps_world_anyone() -> None:
    assert acls.fixup("/p", (), OPEN_ACL_UNSAFE) == OPEN_ACL_UNSAFE


def test_fixup_removes_duplicates_keeping_first_order() -> None:
    acl = (ACL(READ, ANYONE), ACL(ALL, ALICE), ACL(READ, ANYONE), ACL(ALL, ALICE), ACL(WRITE, ANYONE))
    assert acls.fixup("/p", (), acl) == (ACL(READ, ANYONE), ACL(ALL, ALICE), ACL(WRITE, ANYONE))


def test_fixup_dedup_happens_before_auth_expansion() -> None:
    # removeDuplicates runs on the request's list; the expanded "auth" entry
    # may then repeat an explicit one, as in ZooKeeper
    acl = (ACL(ALL, Id("auth", "")), ACL(ALL, ALICE))
    assert acls.fixup("/p", (ALICE,), acl) == (ACL(ALL, ALICE), ACL(ALL, ALICE))


def test_fixup_expands_auth_to_every_digest_id_of_the_requester() -> None:
    auth = (Id("ip", "10.0.0.1"), ALICE, BOB)
    assert acls.fixup("/p", auth, CREATOR_ALL_ACL) == (ACL(ALL, ALICE), ACL(ALL, BOB))
    # the id part of an "auth" entry is ignored: only the scheme matters
    assert acls.fixup("/p", auth, (ACL(READ, Id("auth", "whatever")),)) == (ACL(READ, ALICE), ACL(READ, BOB))


def test_fixup_auth_without_an_authenticated_id_is_invalid() -> None:
    # ip is not an authenticated scheme (IPAuthenticationProvider.isAuthenticated is false);
    # super has no provider at all
    assert fixup_code(CREATOR_ALL_ACL) == Code.INVALID_ACL
    assert fixup_code(CREATOR_ALL_ACL, (Id("ip", "10.0.0.1"),)) == Code.INVALID_ACL
    assert fixup_code(CREATOR_ALL_ACL, (SUPER,)) == Code.INVALID_ACL


@pytest.mark.parametrize("acl", [
    (),
    (ACL(ALL, Id("world", "someone")),),
    (ACL(ALL, Id("nosuchscheme", "x")),),
    (ACL(ALL, Id("super", "")),),
    (ACL(ALL, Id("digest", "no-colon")),),
    (ACL(ALL, Id("digest", "a:b:c")),),
    (ACL(ALL, Id("ip", "not-an-ip")),),
    (ACL(ALL, Id("ip", "10.0.0.1/33")),),
    (ACL(ALL, Id("ip", "10.0.0.1/x")),),
    (ACL(ALL, Id("ip", "::1/129")),),
    (ACL(READ, ANYONE), ACL(ALL, Id("digest", "bad"))),
])
def test_fixup_refuses_malformed_entries(acl: tuple[ACL, ...]) -> None:
    assert fixup_code(acl) == Code.INVALID_ACL


@pytest.mark.parametrize("id_", [
    Id("digest", "alice:abc"), Id("digest", ":abc"), Id("ip", "10.0.0.1"), Id("ip", "10.0.0.0/8"),
    Id("ip", "10.0.0.0/0"), Id("ip", "10.0.0.0/32"), Id("ip", "::1"), Id("ip", "fe80::/10"),
])
def test_fixup_accepts_wellformed_ids(id_: Id) -> None:
    assert acls.fixup("/p", (), (ACL(READ, id_),)) == (ACL(READ, id_),)


# DigestAuthenticationProvider.isValid is id.split(":").length == 2, and Java's split drops trailing
# empty strings (DigestAuthenticationProvider.java 149-152). (Found by these tests; fixed in fe81526.)
def test_fixup_digest_validity_follows_java_split() -> None:
    assert fixup_code((ACL(READ, Id("digest", "alice:hash:")),)) == Code.OK


def test_fixup_names_the_path_in_its_error() -> None:
    with pytest.raises(ZKError) as err:
        acls.fixup("/some/path", (), ())
    assert err.value.code == Code.INVALID_ACL and err.value.path == "/some/path"


# -------------------------------------------------------------------- check


def test_empty_acl_allows_everything() -> None:
    assert acls.allowed((), ADMIN, ())


def test_world_anyone_allows_only_its_perms() -> None:
    acl = (ACL(READ | WRITE, ANYONE),)
    assert acls.allowed(acl, READ, ())
    assert acls.allowed(acl, WRITE, ())
    assert not acls.allowed(acl, CREATE, ())
    assert not acls.allowed(acl, DELETE, ())
    assert not acls.allowed(acl, ADMIN, ())


def test_any_bit_of_the_requested_perms_suffices() -> None:
    # checkACL: (a.getPerms() & perm) != 0 -- getACL asks READ|ADMIN
    assert acls.allowed((ACL(ADMIN, ANYONE),), READ | ADMIN, ())
    assert acls.allowed((ACL(READ, ANYONE),), READ | ADMIN, ())
    assert not acls.allowed((ACL(WRITE, ANYONE),), READ | ADMIN, ())


def test_digest_matches_exactly() -> None:
    acl = (ACL(ALL, ALICE),)
    assert acls.allowed(acl, WRITE, (ALICE,))
    assert not acls.allowed(acl, WRITE, (BOB,))
    assert not acls.allowed(acl, WRITE, ())
    # same id string under another scheme is not the same id
    assert not acls.allowed(acl, WRITE, (Id("ip", ALICE.id),))
    # one matching id among several is enough
    assert acls.allowed(acl, WRITE, (Id("ip", "10.0.0.1"), BOB, ALICE))


def test_ip_exact_address() -> None:
    acl = (ACL(ALL, Id("ip", "10.1.2.3")),)
    assert acls.allowed(acl, READ, (Id("ip", "10.1.2.3"),))
    assert not acls.allowed(acl, READ, (Id("ip", "10.1.2.4"),))


@pytest.mark.parametrize(("spec", "client", "ok"), [
    ("10.1.0.0/16", "10.1.200.7", True),
    ("10.1.0.0/16", "10.2.0.1", False),
    ("10.1.2.3/16", "10.1.99.99", True),  # host bits of the spec are masked, as ZooKeeper's mask() does
    ("10.0.0.0/8", "10.255.255.255", True),
    ("10.0.0.0/8", "11.0.0.0", False),
    ("0.0.0.0/0", "192.168.1.1", True),
    ("192.168.1.1/32", "192.168.1.1", True),
    ("192.168.1.1/32", "192.168.1.2", False),
    ("10.1.2.0/23", "10.1.3.200", True),
    ("10.1.2.0/23", "10.1.4.1", False),
    ("fe80::/10", "fe80::1", True),
    ("fe80::/10", "fec0::1", False),
    ("::1", "::1", True),
    ("10.0.0.0/8", "::1", False),  # v4 spec, v6 client: different formats never match
])
def test_ip_networks(spec: str, client: str, ok: bool) -> None:
    assert acls.allowed((ACL(READ, Id("ip", spec)),), READ, (Id("ip", client),)) is ok


def test_superuser_bypasses_every_acl() -> None:
    nobody = (ACL(READ, BOB),)
    for perm in (READ, WRITE, CREATE, DELETE, ADMIN):
        assert acls.allowed(nobody, perm, (SUPER,))
        assert not acls.allowed(nobody, perm, (ALICE,))


# ZooKeeperServer.checkACL bypasses for any id whose scheme is 'super' (ZooKeeperServer.java 2077-2081;
# X509AuthenticationProvider adds Id('super', clientId)). (Found by these tests; fixed in fe81526.)
def test_superuser_is_any_id_of_the_super_scheme() -> None:
    assert acls.allowed((ACL(READ, BOB),), WRITE, (Id("super", "CN=admin"),))


def test_check_raises_no_auth_with_the_path() -> None:
    with pytest.raises(ZKError) as err:
        acls.check((ACL(READ, ANYONE),), WRITE, (), "/x")
    assert err.value.code == Code.NO_AUTH and err.value.path == "/x"
    acls.check((ACL(WRITE, ANYONE),), WRITE, (), "/x")


# -------------------------------------------------------------------- paths


@pytest.mark.parametrize("path", [
    "/", "/a", "/a/b", "/a.b", "/.a", "/a.", "/...", "/a/..b", "/a/b..", "/zookeeper", "/ü", "/a b",
    "/a/0000000001", "/\u00a0", "/\uf900", "/\uffef",
])
def test_valid_paths(path: str) -> None:
    assert paths.problem(path) is None
    paths.validate(path)


@pytest.mark.parametrize("path", [
    "", "a", "a/b", "/a/", "//", "/a//b", "/.", "/..", "/a/.", "/a/..", "/./a", "/../a", "/a/./b", "/a/../b",
    "/a\x00b", "/a\x01", "/a\x1f", "/a\x7f", "/a\x9f", "/a\ud800", "/a\ue000", "/a\uf8ff", "/a\ufff0",
    "/a\uffff", "/a\U0001f600",  # a surrogate pair in Java's UTF-16: refused
])
def test_invalid_paths(path: str) -> None:
    assert paths.problem(path) is not None
    with pytest.raises(ZKError) as err:
        paths.validate(path)
    assert err.value.code == Code.BAD_ARGUMENTS


def test_path_problem_messages_follow_pathutils() -> None:
    assert paths.problem("") == "path length must be > 0"
    assert paths.problem("a") == "path must start with / character"
    assert paths.problem("/a/") == "path must not end with / character"
    assert paths.problem("/a//b") == "empty node name specified @3"
    assert paths.problem("/a/..") == "relative paths not allowed @4"
    assert paths.problem("/a/./b") == "relative paths not allowed @3"
    assert paths.problem("/a\x00b") == "null character not allowed @2"
    assert paths.problem("/a\x01") == "invalid character @2"


def test_parent_child_and_name() -> None:
    assert paths.parent_of("/a") == "/"
    assert paths.parent_of("/a/b/c") == "/a/b"
    assert paths.child_path("/", "a") == "/a"
    assert paths.child_path("/a", "b") == "/a/b"
    assert paths.name_of("/a/b") == "b"
    assert paths.name_of("/a") == "a"
