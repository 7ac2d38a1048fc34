"""API keys -> tenants, and the (tenant, user) memory namespace: valid, injective, tenant-bound."""

from __future__ import annotations

import hmac
import random

import pytest

from memroute.api import tenancy
from memroute.api.tenancy import ApiKeys, parse_key_list
from memroute.config.api import ApiConfig
from memroute.namespace import HASH_PREFIX, namespace, namespaced_user_id, split_namespace, tenant_of
from memroute.errors import ConfigError, InvalidRequest, Unauthorized
from memroute.types import validate_user_id

# ------------------------------------------------------------------------------------ API keys


def keys(**kw):
    env = {"MEMROUTE_API_KEYS": "sk-beta:with:colons:globex, sk-gamma:acme,"}
    return ApiKeys.from_config({"sk-alpha-123": "acme"}, "MEMROUTE_API_KEYS", environ=env, **kw)


def test_keys_from_config_and_env():
    k = keys()
    assert len(k) == 3 and k.tenants == {"acme", "globex"}
    assert k.authenticate("Bearer sk-alpha-123") == "acme"
    assert k.authenticate("Bearer sk-beta:with:colons") == "globex"  # key may hold ':'
    assert k.authenticate("bearer   sk-gamma  ") == "acme"  # scheme case-insensitive


def test_from_api_config_reads_the_named_env_vars():
    cfg = ApiConfig(api_keys={"k1": "t1"}, api_keys_env=["A_KEYS", "B_KEYS"])
    k = ApiKeys.from_api_config(cfg, environ={"A_KEYS": "k2:t2", "B_KEYS": "k3:t3"})
    assert [k.authenticate(f"Bearer k{i}") for i in (1, 2, 3)] == ["t1", "t2", "t3"]


@pytest.mark.parametrize(
    "header,message",
    [
        (None, "missing API key"),
        ("", "missing API key"),
        ("   ", "missing API key"),
        ("Basic dXNlcjpwYXNz", "malformed"),
        ("Bearer", "malformed"),
        ("Bearer    ", "malformed"),
        ("sk-alpha-123", "malformed"),
        ("Bearer sk-alpha-12", "invalid API key"),
        ("Bearer sk-alpha-1234", "invalid API key"),
        ("Bearer SK-ALPHA-123", "invalid API key"),
    ],
)
def test_missing_or_bad_key_is_401(header, message):
    with pytest.raises(Unauthorized) as e:
        keys().authenticate(header)
    assert e.value.status == 401 and message in e.value.message
    assert e.value.field == "authorization"
    assert "sk-alpha" not in e.value.message  # never echo keys


def test_every_key_is_compared_with_compare_digest(monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(tenancy.hmac, "compare_digest", spy)
    k = keys()
    assert k.authenticate("Bearer sk-alpha-123") == "acme"  # the first key: no early exit
    assert len(calls) == 3 and all(a == b == 32 for a, b in calls)


def test_anonymous_tenant_only_without_a_header():
    k = ApiKeys.from_config({}, [], environ={}, anonymous_tenant="local")
    assert k.authenticate(None) == "local"
    with pytest.raises(Unauthorized):
        k.authenticate("Bearer guess")


def test_no_keys_at_all_is_a_config_error():
    with pytest.raises(ConfigError) as e:
        ApiKeys.from_config({}, "MEMROUTE_API_KEYS", environ={})
    assert e.value.field == "api.api_keys" and "MEMROUTE_API_KEYS" in e.value.message


@pytest.mark.parametrize(
    "text",
    ["secretkey", "secretkey:", ":acme", "secretkey:ac/me", "secretkey:a:b:c d"],
)
def test_malformed_env_entries_name_the_variable_not_the_key(text):
    with pytest.raises(ConfigError) as e:
        ApiKeys.from_config({}, "MY_KEYS", environ={"MY_KEYS": f"ok:acme,{text}"})
    assert e.value.field == "MY_KEYS" and "#1" in e.value.message
    assert "secretkey" not in e.value.message


def test_one_key_two_tenants_is_refused():
    with pytest.raises(ConfigError):
        parse_key_list("k:acme,k:globex", source="X")
    with pytest.raises(ConfigError) as e:
        ApiKeys.from_config({"k": "acme"}, "X", environ={"X": "k:globex"})
    assert e.value.field == "X"
    # The same mapping twice is harmless.
    assert len(ApiKeys.from_config({"k": "acme"}, "X", environ={"X": "k:acme"})) == 1


@pytest.mark.parametrize("tenant", ["a:b", "", "ac me", "x" * 65, "-acme"])
def test_bad_tenant_names_are_config_errors(tenant):
    with pytest.raises(ConfigError) as e:
        ApiKeys({"k": tenant})
    assert e.value.field == "api.api_keys"


def test_blank_key_is_a_config_error():
    for key in ["", " ", " k"]:
        with pytest.raises(ConfigError):
            ApiKeys({key: "acme"})


# ----------------------------------------------------------------------------------- namespace


def test_plain_users_keep_the_journal_encoding():
    for tenant, user in [("acme", "alice"), ("t-1.x", "alice:work"), ("a@b", "user@example.com")]:
        uid = namespace(tenant, user)
        assert uid == namespaced_user_id(tenant, user) == f"{tenant}:{user}"
        assert split_namespace(uid) == (tenant, user)


def test_other_users_are_hashed_into_a_valid_id():
    for user in ["al/ice", "a b", "émile", "x" * 300, "_x", "\n", "a\x00b", "\ud800",
                 "Robert'); DROP TABLE--", 'user_id == "bob"']:
        uid = namespace("t" * 64, user)
        assert validate_user_id(uid) == uid and len(uid) <= 128
        assert uid.startswith("t" * 64 + ":" + HASH_PREFIX)
        assert split_namespace(uid) == ("t" * 64, None)
    # The plain/hash boundary at 128 characters.
    assert namespace("acme", "u" * 123) == "acme:" + "u" * 123
    assert namespace("acme", "u" * 124).startswith("acme:" + HASH_PREFIX)


def test_crafted_users_cannot_reach_another_namespace():
    hashed = namespace("acme", "al/ice")
    token = hashed.split(":", 1)[1]  # "sha256.<digest>"
    assert namespace("acme", token) != hashed  # a user spelling the hashed form is hashed again
    # Smuggling a tenant through the user never changes the tenant of the namespace.
    for user in ["globex:alice", "globex", ":globex:alice", "acme:alice", "globex%3Aalice"]:
        uid = namespace("acme", user)
        assert tenant_of(uid) == "acme"
        assert uid != namespace("globex", "alice")
    # Same strings split differently between tenant and user still differ.
    assert namespace("acm", "e:x") != namespace("acme", "x")
    assert namespace("a", "b.c") != namespace("a.b", "c")


def test_namespace_is_injective_on_adversarial_inputs():
    rng = random.Random(7)
    tenants = ["acme", "acm", "acme.io", "a", "globex", "t" * 64, "acme-x", "x@y"]
    alphabet = "ab:._@-/ é\u202e" + "sha256."
    users = {"alice", "alice:", "alice:bob", "sha256.", "sha256.x", "x" * 127, "x" * 128,
             "a" * 63, "a" * 64, "sha25", HASH_PREFIX + "A" * 43}
    users |= {namespace("acme", u).split(":", 1)[1] for u in ["al/ice", "bob smith"]}
    while len(users) < 600:
        users.add("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 140))))
    seen: dict[str, tuple[str, str]] = {}
    for t in tenants:
        for u in users:
            uid = namespace(t, u)
            assert validate_user_id(uid) == uid
            assert tenant_of(uid) == t
            assert seen.setdefault(uid, (t, u)) == (t, u), f"{(t, u)} and {seen[uid]} collide"
            plain = split_namespace(uid)[1]
            assert plain is None or plain == u
    assert len(seen) == len(tenants) * len(users)


def test_namespace_refuses_bad_parts():
    with pytest.raises(InvalidRequest) as e:
        namespace("a:b", "c")  # a tenant with ':' would make the split ambiguous
    assert e.value.field == "tenant"
    for bad in ["", None, 5]:
        with pytest.raises(InvalidRequest) as e:
            namespace("acme", bad)
        assert e.value.field == "user"
    for bad in ["alice", "acme:", ":x", "acme/x:y"]:
        with pytest.raises(InvalidRequest):
            split_namespace(bad)
