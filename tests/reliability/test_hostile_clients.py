"""Hostile clients against the real app (real HTTP, Ray Serve, Milvus Lite, the journal).

Two parts:

* **Fuzzing every endpoint** with Hypothesis (derandomized, so a CI run is reproducible):
  ``POST /v1/chat/completions`` with structurally plausible bodies whose every field takes
  random values (unicode, lone surrogates sent as ``\\ud800`` JSON text, NUL, huge strings,
  edge numbers such as 10**400, wrong types, extra keys, Idempotency-Key headers), arbitrary
  JSON values and raw bytes; ``GET /v1/models``; ``DELETE /v1/memory/users/{user}`` with random
  path segments; the admin endpoints with random query parameters (``DELETE
  /admin/tenants/{t}/memory`` only on throwaway tenants); random methods and paths; random,
  missing and garbage ``Authorization`` and ``Content-Type`` headers. The property: never a
  5xx or a broken connection, every non-2xx body is OpenAI's error shape, every 2xx body is
  what the endpoint promises, and ``/healthz`` is ``ok`` afterwards.

* **Isolation under hostile input**: victims in both tenants state a secret (the mock tier
  acknowledges it verbatim, so it is stored and echoed back to its owner). Attackers then ask
  for it with forged user ids (case, whitespace, homoglyphs, fullwidth, zero-width characters,
  NFC/NFD, control characters, the reserved ``sha256.`` prefix, the tenant separator, the length
  limit), filter-expression payloads in every string field, another tenant's key, and the
  victims' own Idempotency-Keys; before the journal is drained (read-your-writes) and after it
  (Milvus), concurrently so attackers share batches with each other. Then erasures of forged
  users and of look-alike tenants (``ACME``, ``acm_``...). No secret and no victim memory id
  may reach any attacker, and every victim's memories must survive.

Also: a sweep setting each field of a valid body to each edge value (what random sampling
rarely reaches: ``temperature: 10**400`` was a 500), malformed HTTP framing on a raw socket
(refused by uvicorn before the app, or by the app; never a 5xx), and two defects fuzzing found,
fixed and kept as regressions (a trailing slash redirected; a turn-pair over the store's 8,192
bytes was answered but not remembered).

The figures go to ``.memroute/reliability/hostile_clients.json`` (docs/RELIABILITY.md).
"""

from __future__ import annotations

import json
import re
import secrets
import socket
import threading
import time
import unicodedata
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memroute.namespace import HASH_PREFIX, namespace
from tests.reliability.conftest import ADMIN, KEYS, TIMEOUT, auth, error_of, record

pytestmark = pytest.mark.reliability

KEY_OF = {t: k for k, t in KEYS.items()}  # tenant -> key
PROTECTED_TENANTS = frozenset(KEYS.values())  # never erased by the fuzzer
MEMORY_IDS = "x-memroute-memory-ids"
QUESTION = "What is my vault code?"


def fuzz_settings(n: int):
    return settings(deadline=None, derandomize=True, database=None, max_examples=n,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.large_base_example])


# Examples per fuzz test (~410 requests; with the sweep and raw HTTP ~630, ~15 s on 2 busy cores).
N_CHAT, N_CHAT_RAW, N_MODELS, N_ERASE, N_ADMIN, N_ANY = 120, 60, 30, 40, 60, 100

# -- what the module measured (recorded by the last test) ----------------------------------

STATS: dict = {
    "started": time.perf_counter(),
    "fuzz_cases": Counter(),  # endpoint -> requests sent
    "fuzz_status": Counter(),  # status code -> count (fuzzing only)
    "fuzz_s": 0.0,
    "isolation": Counter(),  # payloads tried per kind, and leaks
    "isolation_s": 0.0,
    "isolation_status": Counter(),
}


# -- strategies ---------------------------------------------------------------------------------

# Characters that break naive code: NUL, lone surrogates (json.dumps writes them as "\ud800"
# escapes), zero-width and bidi marks, BOM, non-characters, combining marks, quotes, template
# braces, escape sequences.
SPECIAL = ("\x00", "\ud800", "\udfff", "\ud83d", "\u200b", "\u200d", "\u202e", "\ufeff", "\uffff",
           "\U0010ffff", "\x1b[2J", "\x7f", "\x85", "\u2028", "e\u0301", "\U0001f642", "\\", '"',
           "'", "%", "*", "_", "{query}", "{0}", "{memory_a}", "\r\n", " ", "")
HUGE = (255, 256, 257, 2100, 8193, 32_000, 32_001, 120_000)  # around every length limit
EDGE_NUMBERS = (0, 1, -1, 2, 1024, 1025, 2**31, 2**53 + 1, 2**63, 2**64, 10**400, -(10**400),
                0.5, 2.0000001, -0.0, 1e-320, 1e308, float("nan"), float("inf"), float("-inf"))

texts = st.one_of(
    st.text(max_size=24),
    st.lists(st.one_of(st.text(max_size=6), st.sampled_from(SPECIAL)), min_size=1, max_size=6)
    .map("".join),
    st.builds(lambda ch, n: ch * n, st.sampled_from(["x", "\u00e9", "\U0001f642", " "]),
              st.sampled_from(HUGE)),
)
numbers = st.one_of(st.integers(), st.floats(), st.sampled_from(EDGE_NUMBERS))
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers, texts),
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(texts, kids, max_size=4)),
    max_leaves=10,
)


def _or_anything(*options):
    """The given options, or any JSON value (wrong types)."""
    return st.one_of(*options, json_values)


parts = st.lists(st.fixed_dictionaries({
    "type": _or_anything(st.just("text"), st.sampled_from(["image_url", "input_audio", "Text"])),
    "text": _or_anything(texts),
}), max_size=3)
message = st.fixed_dictionaries(
    {"role": _or_anything(st.sampled_from(["user", "system", "assistant", "tool", "developer",
                                           "USER", " user"])),
     "content": _or_anything(texts, parts)},
    optional={"name": _or_anything(texts), "tool_call_id": json_values},
)
user_message = st.fixed_dictionaries({"role": st.just("user"), "content": st.one_of(texts, parts)})
messages = st.one_of(
    st.builds(lambda head, last: [*head, last], st.lists(message, max_size=3), user_message),
    st.builds(lambda head, last: [*head, last], st.lists(message, max_size=3), user_message),
    st.lists(message, max_size=4),
    json_values,
)


def _one_field(name: str, value: object) -> dict:
    """A valid body with one field set to ``value``: reaches every validator, not only the first."""
    body = {"model": "memroute", "user": "fuzz-one", "messages": [{"role": "user", "content": "hello"}]}
    if name.startswith("messages[0]."):
        body["messages"][0][name.split(".")[1]] = value
    else:
        body[name] = value
    return body


ONE_FIELD = ("model", "messages", "messages[0].role", "messages[0].content", "user", "temperature",
             "max_tokens", "max_completion_tokens", "stream", "stream_options", "n")
random_bodies = st.builds(
    lambda body, extra: {**extra, **body},
    st.fixed_dictionaries(
        {"model": _or_anything(st.just("memroute"), st.just("memroute"), texts),
         "messages": messages},
        optional={
            "user": _or_anything(texts, st.from_regex(r"[a-z][a-z0-9_.:@-]{0,20}", fullmatch=True)),
            "temperature": _or_anything(numbers),
            "max_tokens": _or_anything(numbers),
            "max_completion_tokens": _or_anything(numbers),
            "stream": _or_anything(st.booleans()),
            "stream_options": _or_anything(st.fixed_dictionaries(
                {}, optional={"include_usage": _or_anything(st.booleans())})),
            "n": _or_anything(st.just(1), numbers),
            "top_p": json_values, "stop": json_values, "seed": json_values, "tools": json_values,
        },
    ),
    st.dictionaries(texts, json_values, max_size=3),  # unknown keys (OpenAI ignores them)
)
chat_bodies = st.one_of(
    random_bodies,
    st.builds(_one_field, st.sampled_from(ONE_FIELD), st.one_of(numbers, texts, json_values)),
)


def _header_safe(raw: bytes) -> bytes:
    """A header value as RFC 9110 allows it (visible bytes and obs-text, inner spaces and tabs):
    other bytes are refused by the HTTP parser (uvicorn's plain-text 400, see
    :func:`test_malformed_http_is_refused_without_a_crash`) or by our own client, never by the app."""
    return re.sub(rb"[\x00-\x08\x0a-\x1f\x7f]", b"", raw).strip(b" \t")


VALID_AUTH = [f"Bearer {k}" for k in KEYS] + [f"Bearer {ADMIN}"]
GARBAGE_AUTH = ["", "Bearer", "bearer sk-rel-a", "BEARER   sk-rel-a", "Basic c2stcmVsLWE6",
                "Bearer sk-rel-a sk-rel-b", "Bearer sk-rel-a,Bearer sk-rel-b", "Token sk-rel-a",
                "Bearer sk-rel-\u00e4", "Bearer " + "k" * 8000, "Bearer sk-rel-admin\u00a0"]
authorizations = st.one_of(
    st.none(),
    st.sampled_from(VALID_AUTH),
    st.sampled_from(GARBAGE_AUTH),
    st.text(max_size=40).map(lambda t: f"Bearer {t}"),
    st.binary(max_size=40).map(_header_safe),  # latin-1 bytes, as a broken client sends them
)
CONTENT_TYPES = ("application/json", "application/json; charset=utf-8", "APPLICATION/JSON",
                 "application/vnd.api+json", "text/plain", "application/x-www-form-urlencoded",
                 "multipart/form-data; boundary=x", "application/json;;;", ";", "*/*",
                 "application/jsonx", "")
content_types = st.one_of(st.none(), st.sampled_from(CONTENT_TYPES),
                          st.binary(max_size=30).map(_header_safe))
idempotency_keys = st.one_of(st.none(), st.from_regex(r"[ -~]{1,40}", fullmatch=True),
                             st.sampled_from(["", " ", "k" * 256, "\u00e9t\u00e9", "a\tb"]))


def headers_of(authorization=None, content_type=None, idem=None, *, extra=()) -> list[tuple]:
    """A header list (duplicates allowed), every value as the bytes a client would send."""
    out = [("authorization", authorization), ("content-type", content_type),
           ("idempotency-key", idem), *extra]
    return [(k, _header_safe(v if isinstance(v, bytes) else v.encode("utf-8", "surrogatepass")))
            for k, v in out if v is not None]


def pct(text: str) -> str:
    """One percent-encoded path segment (a lone surrogate as its raw, invalid UTF-8 bytes)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def encode_body(body, ascii_only: bool) -> bytes:
    """JSON text as a client sends it: with ``ascii_only`` a lone surrogate is the escape text
    ``\\ud800`` (valid JSON); without it, its raw (invalid UTF-8) bytes."""
    return json.dumps(body, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


# Raw bodies: not JSON, too deep, BOMs, UTF-16, numbers past every limit.
RAW_BODIES = (b"", b" ", b"{", b"}", b"null", b"[]", b"{}", b'"\\ud800"', b"NaN", b"-", b"1e999999",
              b"9" * 5000, b"[" * 100_000, b'{"a":' * 40 + b"1" + b"}" * 40, b"\xef\xbb\xbf{}",
              b"\xff\xfe{\x00}\x00", '{"model": "memroute"}'.encode("utf-16"), b"\x00" * 64,
              b'{"model":"memroute","messages":[{"role":"user","content":"hi"}]}' + b"garbage",
              b'{"model":"memroute","model":"x","messages":[{"role":"user","content":"hi"}]}')
raw_bodies = st.one_of(
    st.sampled_from(RAW_BODIES),
    st.binary(max_size=200),
    st.tuples(json_values, st.booleans()).map(lambda t: encode_body(*t)),
)

# Path pieces: the app's own words, traversal, encodings; never a tenant the tests rely on.
VOCAB = ("v1", "chat", "completions", "models", "memory", "users", "admin", "memories", "erasures",
         "tenants", "drain", "healthz", "readyz", "metrics", "openapi.json", "docs", "redoc", "..",
         ".", "%2e%2e", "%2F", "%00", "%ff", "%25", "~", "throwaway-t1", "", "a%20b", "%F0%9F%99%82")
segments = st.one_of(st.sampled_from(VOCAB),
                     st.text(max_size=12).filter(lambda s: s not in PROTECTED_TENANTS).map(pct))
paths = st.one_of(
    st.sampled_from(["/v1/chat/completions", "/v1/models", "/v1/models/", "/v1/memory/users/x",
                     "/admin/memories", "/admin/erasures", "/admin/drain", "/healthz", "/readyz",
                     "/metrics", "/openapi.json", "/docs", "/", "//v1//models", "/V1/MODELS",
                     "/v1/chat/completions/", "/admin/tenants/throwaway-t2/memory",
                     "/" + "a" * 2000]),
    st.lists(segments, min_size=1, max_size=5).map(lambda s: "/" + "/".join(s)),
)
# (a method uvicorn does not know is its plain-text 400: see MALFORMED_HTTP)
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "PROPFIND")
query_params = st.lists(st.tuples(st.sampled_from(["tenant", "user", "limit", "x"]) | st.text(max_size=8),
                                  texts.filter(lambda s: len(s) < 3000)), max_size=4)
throwaway_tenants = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,70}", fullmatch=True),  # valid, and over 64
    texts.filter(lambda s: len(s) < 3000),
).filter(lambda t: t not in PROTECTED_TENANTS)


# -- sending and checking ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def http(app):
    with httpx.Client(base_url=app["url"], timeout=TIMEOUT) as client:
        yield client


def with_query(path: str, params: list[tuple[str, str]]) -> str:
    """``path?k=v&...``, encoded by hand: httpx refuses lone surrogates, a client may not."""
    return path + ("?" + "&".join(f"{pct(k)}={pct(v)}" for k, v in params) if params else "")


def send(http: httpx.Client, endpoint: str, method: str, path: str, **kw) -> httpx.Response:
    """One fuzz request, checked: no 5xx, OpenAI's error shape on every refusal, the promised
    body on success. A connection error or timeout fails the test as it is raised."""
    # an absolute URL: httpx refuses a relative one starting with "//"
    r = http.request(method, str(http.base_url).rstrip("/") + path, **kw)
    STATS["fuzz_cases"][endpoint] += 1
    STATS["fuzz_status"][r.status_code] += 1
    where = f"{method} {path[:120]} -> {r.status_code}: {r.text[:300]!r}"
    assert r.status_code < 500, where
    if method == "HEAD":  # no body, by HTTP
        return r
    if 200 <= r.status_code < 300:
        check_success(r, endpoint)
    else:
        assert r.headers.get("content-type", "").startswith("application/json"), where
        error_of(r)
    return r


def check_success(r: httpx.Response, endpoint: str) -> None:
    """A 2xx is what its endpoint promises (a 200 with an error inside would slip through)."""
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events and events[-1] == "[DONE]", r.text[-300:]
        for event in events[:-1]:
            assert "error" not in json.loads(event), event
        return
    if r.headers.get("content-type", "").startswith("text/plain"):  # /metrics
        assert "memroute_" in r.text
        return
    body = r.json()
    if endpoint.startswith("chat"):
        assert body["object"] == "chat.completion" and body["choices"][0]["message"]["content"] is not None
        assert body["memroute"]["memories_used"]["count"] == len(body["memroute"]["memories_used"]["ids"])
    elif r.request.url.path == "/v1/models":
        assert body["object"] == "list" and body["data"]
    assert "error" not in body, body


def assert_healthy(http: httpx.Client) -> None:
    r = http.get("/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok", r.text


# -- 1. isolation under hostile input ------------------------------------------------------------


@dataclass
class Victim:
    tenant: str
    user: str
    secret: str
    idem: str  # the Idempotency-Key its question was sent with
    ids: set[str] = field(default_factory=set)  # its stored memory ids once planted

    @property
    def key(self) -> str:
        return KEY_OF[self.tenant]


@dataclass
class Attack:
    kind: str
    tenant: str  # of the attacker's key
    body: dict
    idem: str | None = None

    @property
    def user(self) -> object:
        return self.body.get("user")


@dataclass
class Outcome:
    attack: Attack
    status: int
    text: str
    ids: set[str]
    replayed: bool


TAG = secrets.token_hex(3)
VICTIM_USERS = {  # plain ids, hashed ones (unicode, 256 characters), ids holding the separator
    "acme": [f"alice-{TAG}", f"jos\u00e9-{TAG}", f"globex:carol-{TAG}",
             "v" * (255 - len(TAG)) + f"-{TAG}"],  # 256 characters: at the limit
    "globex": [f"alice-{TAG}", f"acme:dave-{TAG}"],
}
ATTACKER = f"mallory-{TAG}"
HOMOGLYPHS = {"a": "\u0430", "e": "\u0435", "o": "\u043e", "c": "\u0441", "i": "\u0456",
              "p": "\u0440", "x": "\u0445", "v": "\u03bd", "l": "\u04cf"}
LOOKALIKE_TENANTS = ("ACME", "Acme", "acm_", "a_me", "acme_", "acm", "acme.", "acme-", "_cme",
                     "acme%", "%", "acme:x", "\u0430cme", "GLOBEX", "globe_", "g_obex", "globex.",
                     "glob", "globex@", "acme globex")
GENERIC_PAYLOADS = ("*", "%", "_", ".*", "' OR '1'='1' --", '" or ""="', "1 or 1", "default",
                    "user_id", '{"$ne": null}', "${jndi:ldap://x/a}", 'user_id like "%"',
                    "\\", '"', "'", "\u0000")


def chat_body(user: object, content: object = QUESTION, *, model: object = "memroute",
              system: str | None = None) -> dict:
    head = [{"role": "system", "content": system}] if system is not None else []
    return {"model": model, "user": user, "messages": [*head, {"role": "user", "content": content}]}


_LOCAL = threading.local()


def _client() -> httpx.Client:
    """One client per thread (building one costs more CPU than a mock request)."""
    if not hasattr(_LOCAL, "client"):
        _LOCAL.client = httpx.Client(timeout=TIMEOUT)
    return _LOCAL.client


def post_chat(body: dict, key: str, url: str, idem: str | None = None) -> httpx.Response:
    headers = {**auth(key), **({"idempotency-key": idem} if idem else {})}
    return _client().post(f"{url}/v1/chat/completions", content=encode_body(body, True),
                          headers={**headers, "content-type": "application/json"})


def answer_of(r: httpx.Response) -> str:
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]["message"]["content"]


def memories_of(http: httpx.Client, tenant: str, user: str) -> dict:
    r = http.get("/admin/memories", params={"tenant": tenant, "user": user}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    return r.json()


def drain(http: httpx.Client) -> None:
    r = http.post("/admin/drain", headers=auth(ADMIN))
    assert r.status_code == 200 and r.json() == {"drained": True}, r.text


def forged_ids(user: str) -> list[str]:
    """Ids a client could send hoping to land in ``user``'s namespace: each a different string."""
    swapped = "".join(HOMOGLYPHS.get(c, c) for c in user)
    first = next((c for c in user if c in HOMOGLYPHS), None)
    one = user.replace(first, HOMOGLYPHS[first], 1) if first else swapped
    fullwidth = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in user)
    forms = [unicodedata.normalize(f, user) for f in ("NFC", "NFD", "NFKC", "NFKD")]
    cands = [
        user.upper(), user.capitalize(), user.swapcase(), user.casefold(), f" {user}", f"{user} ",
        f"{user}\t", f"{user}\n", f"\u200b{user}", f"{user[:1]}\u200d{user[1:]}", f"{user}\u00a0",
        f"{user}\x01", f"{user}\x7f", f"{user}\x85", f"{user}\u202e", f"\ufeff{user}", swapped, one,
        fullwidth, *forms, user[:-1], f"{user}-", f"{user}\x00",  # NUL: refused (400)
        (user + "x" * 256)[:256] if len(user) < 256 else user[:-1] + "w",  # at the limit
        user + "x" * (257 - len(user)) if len(user) < 257 else user + "x",  # over it (400)
    ]
    return [c for c in dict.fromkeys(cands) if c != user]


def victim_payloads(v: Victim) -> list[str]:
    """Filter-expression and namespace tricks aimed at one victim, for any string field."""
    t, u = v.tenant, v.user
    rest = namespace(t, u).split(":", 1)[1]  # the victim's namespace after "tenant:"
    return [f'{u}" or user_id != "', f'{u}" || user_id like "%', f"{u}') or 1=1 --",
            f'user_id == "{t}:{u}"', f'tenant == "{t}"', f"{t}:{u}", f"{t}:%", f"{u[:4]}%",
            f'{{"user_id": "{t}:{u}"}}', f'", "user": "{u}', f"../{t}/{u}", f"{t}%3A{u}",
            rest if rest != u else HASH_PREFIX + u,  # the hashed namespace as a plain id
            f"{t}\x00{u}"]


def attacks_on(victims: list[Victim], *, full: bool = True) -> list[Attack]:
    """Attacks on ``victims``: with ``full=False`` the ones naming a user id (the namespace
    paths; half the forgeries), with ``full`` also the payloads in the other fields. An attack may name another
    victim exactly (globex's key asking as ``alice-...``, whom both tenants have): that victim's
    own secret is then its due; :func:`leaks_in` counts only the others'."""
    out: list[Attack] = []
    tenants = sorted(KEY_OF)
    firsts = {v.tenant: v for v in reversed(victims)}  # one victim per tenant for field payloads
    for v in victims:
        other = next(t for t in tenants if t != v.tenant)
        forged = forged_ids(v.user) if full else forged_ids(v.user)[::2]  # round one: half
        out += [Attack("forged_user", v.tenant, chat_body(f)) for f in forged]
        out += [Attack("cross_tenant", other, chat_body(u)) for u in
                (v.user, f"{v.tenant}:{v.user}", f"{other}:{v.user}", namespace(v.tenant, v.user))]
        # the victim's own key and body from another tenant: a fresh answer, never the replay
        out.append(Attack("idempotency_cross_tenant", other, chat_body(v.user), v.idem))
        out.append(Attack("idempotency_same_tenant", v.tenant, chat_body(forged_ids(v.user)[0]), v.idem))
        if not full:
            continue
        if firsts[v.tenant] is v:  # the payloads differ little between victims
            for p in victim_payloads(v):
                out.append(Attack("user_injection", v.tenant, chat_body(p)))
                out.append(Attack("content_injection", v.tenant, chat_body(ATTACKER, f"{p} {QUESTION}")))
                out.append(Attack("system_injection", other, chat_body(ATTACKER, system=f"Answer as {p}.")))
                out.append(Attack("model_injection", v.tenant, chat_body(ATTACKER, model=p)))
    if full:
        for p in GENERIC_PAYLOADS:
            for t in tenants:
                out.append(Attack("user_injection", t, chat_body(p)))
            parts = [{"type": "text", "text": p}, {"type": "text", "text": QUESTION}]
            out.append(Attack("content_injection", tenants[0], chat_body(ATTACKER, parts)))
    return out


def run_attacks(attacks: list[Attack], url: str) -> list[Outcome]:
    """Concurrently, so attackers of both tenants share the ingress' batches."""
    def one(a: Attack) -> Outcome:
        r = post_chat(a.body, KEY_OF[a.tenant], url, a.idem)
        assert r.status_code < 500, (a, r.text)
        ids = set(filter(None, r.headers.get(MEMORY_IDS, "").split(",")))
        if r.status_code == 200:
            ids |= set(r.json()["memroute"]["memories_used"]["ids"])
        else:
            error_of(r)
        STATS["isolation_status"][r.status_code] += 1
        return Outcome(a, r.status_code, r.text, ids, r.headers.get("idempotent-replayed") == "true")

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(one, attacks))


def leaks_in(outcomes: list[Outcome], victims: list[Victim]) -> list[str]:
    """A victim's secret or memory id in an answer to anyone but that victim."""
    found = []
    for o in outcomes:
        own = (o.attack.tenant, o.attack.user)
        for v in victims:
            if (v.tenant, v.user) != own and (v.secret in o.text or o.ids & v.ids):
                found.append(f"{o.attack.kind} as {own!r} got {v.tenant}/{v.user[:40]!r}")
    return found


@pytest.fixture(scope="module")
def victims(app, http) -> list[Victim]:
    """Each victim states its secret, then asks for it (with an Idempotency-Key) and gets it."""
    planted = [Victim(t, u, f"VC-{secrets.randbelow(10**6):06d}{i}", f"vault-{TAG}-{i}")
               for i, (t, u) in enumerate((t, u) for t, us in VICTIM_USERS.items() for u in us)]
    for v in planted:
        said = answer_of(post_chat(chat_body(v.user, f"My vault code is {v.secret}."), v.key, app["url"]))
        assert v.secret in said
        # positive control: the leak detector's signal (the owner gets the secret back)
        assert v.secret in answer_of(post_chat(chat_body(v.user), v.key, app["url"], v.idem))
    return planted


def check_intact(http: httpx.Client, victims: list[Victim], *, first: bool = False) -> None:
    """Every victim still holds its memories (nothing erased or overwritten by an attacker)."""
    drain(http)
    for v in victims:
        listed = memories_of(http, v.tenant, v.user)
        ids = {m["id"] for m in listed["memories"]}
        if first:
            v.ids = ids
        assert listed["count"] >= 2 and v.ids <= ids, (v, listed)
        assert any(v.secret in m["text"] for m in listed["memories"]), (v, listed)


def test_no_secret_reaches_an_attacker(app, http, victims):
    url = app["url"]
    t0 = time.perf_counter()
    # right after planting (pairs may still be journal-only: read-your-writes), the user ids
    before = run_attacks(attacks_on(victims, full=False), url)
    check_intact(http, victims, first=True)  # drains: the second round reads Milvus
    after = run_attacks(attacks_on(victims), url)
    STATS["isolation_s"] = time.perf_counter() - t0
    outcomes = before + after
    for kind, n in Counter(o.attack.kind for o in outcomes).items():
        STATS["isolation"][kind] += n
    # (round two may replay the attacker's own round-one answer under that key: its due)
    assert not any(o.replayed for o in before if o.attack.kind == "idempotency_cross_tenant")
    # the victim's key with another body: refused as a conflict, never its stored answer
    same = [o for o in outcomes if o.attack.kind == "idempotency_same_tenant"]
    assert {(o.status, json.loads(o.text)["error"]["code"]) for o in same} == {(409, "idempotency_conflict")}
    assert {o.status for o in outcomes if o.attack.kind == "model_injection"} <= {400, 404}  # 400: NUL
    leaks = leaks_in(outcomes, victims)
    STATS["isolation"]["leaks"] += len(leaks)
    assert not leaks, leaks[:20]
    assert sum(o.status == 200 for o in outcomes) > len(outcomes) // 2  # most attacks were answered

    # admin reads of forged ids show only the forger's own pairs
    for v in victims:
        for forged in forged_ids(v.user)[1::5]:
            r = http.get("/admin/memories", params={"tenant": v.tenant, "user": forged}, headers=auth(ADMIN))
            STATS["isolation"]["admin_read_forged"] += 1
            assert r.status_code in (200, 400), r.text
            if r.status_code == 200:
                body = r.json()
                assert not {m["id"] for m in body["memories"]} & v.ids
                assert not any(x.secret in r.text for x in victims), r.text
            else:
                error_of(r)


def test_erasing_lookalikes_erases_no_victim(app, http, victims):
    for v in victims:  # a tenant erasing forged ids of its own victims
        for forged in forged_ids(v.user)[::4] + [f"{v.user}%", "*", "%"]:  # a spread of kinds
            r = http.delete(f"/v1/memory/users/{pct(forged)}", headers=auth(v.key))
            STATS["isolation"]["erase_forged_user"] += 1
            assert r.status_code in (200, 400, 404), r.text
            if r.status_code != 200:
                error_of(r)
    for tenant in LOOKALIKE_TENANTS:  # an operator's typo: no key maps to these, nothing is held
        r = http.delete(f"/admin/tenants/{pct(tenant)}/memory", headers=auth(ADMIN))
        STATS["isolation"]["erase_lookalike_tenant"] += 1
        assert r.status_code in (200, 400, 404), r.text
        if r.status_code == 200:
            assert r.json()["store_rows"] == r.json()["journal_rows"] == 0, (tenant, r.json())
        else:
            error_of(r)
    check_intact(http, victims)


# -- 2. fuzzing (the victims stay planted: the last test checks they survived) ----------------


def _timed(test):
    """Adds the test's wall time to the fuzzing total."""
    def run(http, *a, **kw):
        t0 = time.perf_counter()
        try:
            test(http, *a, **kw)
        finally:
            STATS["fuzz_s"] += time.perf_counter() - t0
        assert_healthy(http)
    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


@fuzz_settings(N_CHAT)
@given(body=chat_bodies, ascii_only=st.booleans(),
       authorization=st.one_of(st.sampled_from(VALID_AUTH[:2]), st.sampled_from(VALID_AUTH[:2]),
                               authorizations),
       content_type=st.one_of(st.just("application/json"), content_types), idem=idempotency_keys,
       twice=st.booleans())
def _fuzz_chat(http, body, ascii_only, authorization, content_type, idem, twice):
    extra = [("idempotency-key", "dup")] if idem and twice else ()  # two keys: a 400
    send(http, "chat", "POST", "/v1/chat/completions", content=encode_body(body, ascii_only),
         headers=headers_of(authorization, content_type, idem, extra=extra))


@fuzz_settings(N_CHAT_RAW)
@given(raw=raw_bodies, authorization=st.one_of(st.sampled_from(VALID_AUTH[:2]), authorizations),
       content_type=content_types)
def _fuzz_chat_raw(http, raw, authorization, content_type):
    send(http, "chat_raw", "POST", "/v1/chat/completions", content=raw,
         headers=headers_of(authorization, content_type))


@fuzz_settings(N_MODELS)
@given(authorization=authorizations, method=st.sampled_from(["GET", "GET", "HEAD"]),
       params=query_params)
def _fuzz_models(http, authorization, method, params):
    send(http, "models", method, with_query("/v1/models", params), headers=headers_of(authorization))


@fuzz_settings(N_ERASE)
@given(segment=st.one_of(segments, texts.filter(lambda s: len(s) < 3000).map(pct),
                         st.sampled_from(["u" * 256, "u" * 257, "u" * 5000, "%2e", "a%2Fb", "%"])),
       authorization=st.one_of(st.sampled_from(VALID_AUTH[:2]), authorizations))
def _fuzz_erase_user(http, segment, authorization):
    send(http, "erase_user", "DELETE", f"/v1/memory/users/{segment}", headers=headers_of(authorization))


ADMIN_ENDPOINTS = (("GET", "/admin/memories"), ("GET", "/admin/erasures"), ("POST", "/admin/drain"),
                   ("GET", "/metrics"), ("GET", "/readyz"), ("GET", "/openapi.json"))


@fuzz_settings(N_ADMIN)
@given(endpoint=st.one_of(st.sampled_from(ADMIN_ENDPOINTS),
                          throwaway_tenants.map(lambda t: ("DELETE", f"/admin/tenants/{pct(t)}/memory"))),
       params=query_params,
       authorization=st.one_of(st.just(f"Bearer {ADMIN}"), st.just(f"Bearer {ADMIN}"), authorizations))
def _fuzz_admin(http, endpoint, params, authorization):
    method, path = endpoint
    send(http, "admin", method, with_query(path, params), headers=headers_of(authorization))


@fuzz_settings(N_ANY)
@given(method=st.sampled_from(METHODS), path=paths, params=query_params, body=st.none() | raw_bodies,
       authorization=authorizations, content_type=content_types,
       extra=st.lists(st.tuples(st.from_regex(r"x-[a-z0-9-]{1,12}", fullmatch=True),
                                st.binary(max_size=30).map(_header_safe)), max_size=3))
def _fuzz_any_request(http, method, path, params, body, authorization, content_type, extra):
    send(http, "any", method, with_query(path, params), content=body,
         headers=headers_of(authorization, content_type, extra=extra))


test_fuzz_chat_structured = _timed(_fuzz_chat)
test_fuzz_chat_raw_bodies = _timed(_fuzz_chat_raw)
test_fuzz_models = _timed(_fuzz_models)
test_fuzz_erase_user_paths = _timed(_fuzz_erase_user)
test_fuzz_admin_endpoints = _timed(_fuzz_admin)
test_fuzz_any_method_path_and_header = _timed(_fuzz_any_request)


EDGE_VALUES = (10**400, -(10**400), 2**64, 1e308, float("nan"), float("inf"), -1, 0, 2.0000001, True,
               None, "", "\ud800", "\x00", [], {}, "x" * 9000, "\U0001f642" * 2100, "x" * 40_000)


def test_every_field_takes_every_edge_value(http):
    """The sweep random sampling rarely hits: each field of a valid body set to each edge value
    (10**400 as temperature was a 500: math.isfinite(int) overflowed; fixed in schema.py)."""
    t0 = time.perf_counter()
    for name in ONE_FIELD:
        for value in EDGE_VALUES:
            r = send(http, "chat_sweep", "POST", "/v1/chat/completions", headers=auth(),
                     content=encode_body(_one_field(name, value), True))
            if name == "temperature" and isinstance(value, int) and abs(value) > 2:
                assert r.status_code == 400 and error_of(r)["param"] == "temperature"
    STATS["fuzz_s"] += time.perf_counter() - t0
    assert_healthy(http)


def test_a_trailing_slash_is_an_openai_error_not_a_redirect(http):
    """Was FastAPI's 307 with an empty body and a Location built from the Host header."""
    r = http.get("/v1/models/", headers={**auth(), "host": "attacker.example"})
    assert r.status_code == 404, (r.status_code, r.headers.get("location"))
    error_of(r)


def test_an_answered_message_is_remembered(app, http):
    """Was: the API takes 32,000 characters, the store 8,192 bytes per turn-pair, so the answer
    was sent and the pair parked (journal 'failed'): lost. Now stored shortened in the middle."""
    user = f"long-{TAG}"
    r = post_chat(chat_body(user, "\U0001f642" * 2100), KEY_OF["acme"], app["url"])  # 8,400 bytes
    assert r.status_code == 200, r.text  # answered, so acknowledged: it must be remembered
    drain(http)
    assert memories_of(http, "acme", user)["count"] == 1


def raw_http(url: str, data: bytes, *, half_close: bool = False) -> tuple[int | None, bytes]:
    """Send ``data`` as-is on a fresh connection; the status (None if the server just closed)
    and the body. ``half_close``: stop sending after ``data`` (a client that went away)."""
    host, port = httpx.URL(url).host, httpx.URL(url).port
    with socket.create_connection((host, port), timeout=TIMEOUT) as sock:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return (int(m.group(1)) if m else None), body


CHAT = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
KEYED = CHAT + b"Authorization: Bearer sk-rel-a\r\n"
MALFORMED_HTTP = {  # name -> (bytes, True: the app must answer (JSON), None: the client hangs up)
    "control byte in a header": (KEYED + b"Content-Type: \x01\r\n\r\n", False),
    "Content-Length not a number": (CHAT + b"Content-Length: abc\r\n\r\n{}", False),
    "negative Content-Length": (CHAT + b"Content-Length: -1\r\n\r\n{}", False),
    "Content-Length and chunked": (CHAT + b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
                                   False),
    "bad chunk size": (KEYED + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", False),
    "garbage request line": (b"GARBAGE\r\n\r\n", False),
    "unknown method": (b"FOO /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", False),
    "HTTP/1.0 without Host": (b"GET /v1/models HTTP/1.0\r\n\r\n", True),
    "a 100 kB header": (b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
                        + b"a" * 100_000 + b"\r\n\r\n", False),
    "huge declared body": (KEYED + b"Content-Length: 99999999999\r\n\r\n{}", True),
    "body cut short": (KEYED + b"Content-Length: 100\r\n\r\n{\"model\"", None),
}


def test_malformed_http_is_refused_without_a_crash(app, http):
    """Framing the HTTP parser refuses (uvicorn's plain-text 400, before the app: not OpenAI's
    shape, and no app code could change that) and framing the app sees (its JSON error)."""
    for name, (data, app_answers) in MALFORMED_HTTP.items():
        status, body = raw_http(app["url"], data, half_close=app_answers is None)
        STATS["fuzz_cases"]["raw_http"] += 1
        STATS["fuzz_status"][status or "closed"] += 1
        assert status is None or status < 500, (name, status, body[:200])
        if app_answers:
            assert status is not None and 400 <= status < 500 and "error" in json.loads(body), (name, body)
    assert_healthy(http)


# -- 3. afterwards ------------------------------------------------------------------------------


def test_the_app_survived_and_the_victims_too(app, http, victims):
    """After every hostile request: healthy and the victims intact; then the figures."""
    assert_healthy(http)
    check_intact(http, victims)
    health = http.get("/healthz").json()
    figures = {
        "fuzz_cases": dict(STATS["fuzz_cases"]),
        "fuzz_cases_total": sum(STATS["fuzz_cases"].values()),
        "fuzz_status": {str(k): v for k, v in sorted(STATS["fuzz_status"].items(), key=str)},
        "fuzz_s": round(STATS["fuzz_s"], 1),
        "isolation_payloads": dict(STATS["isolation"]),
        "isolation_payloads_total": sum(n for k, n in STATS["isolation"].items() if k != "leaks"),
        "isolation_s": round(STATS["isolation_s"], 1),
        "isolation_status": {str(k): v for k, v in sorted(STATS["isolation_status"].items())},
        "victims": len(victims),
        "leaks": STATS["isolation"]["leaks"],
        "journal": health["journal"],  # "failed": pairs the store refused (0 since the fix)
        "known_deviations": [
            "framing uvicorn refuses (bad header bytes, methods, lengths): its plain-text 400",
        ],
        "duration_s": round(time.perf_counter() - STATS["started"], 1),
    }
    print(f"\n[hostile_clients] {json.dumps(figures)}")
    record("hostile_clients", figures)

