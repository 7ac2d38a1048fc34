"""Seeded replay traces (docs/TRACES.md): many users' requests over simulated days, time-ordered.

memroute's claim is temporal -- the first question on a topic may need the expensive model, later
similar ones draw on the memory its answer left -- so a trace interleaves, per user, statements of
personal facts ("My locker code is ZX-4471."), updates that change them, and questions about them:
``novel`` (the first question about a fact), ``repeat`` (the exact same text again) and
``paraphrase`` (the same question reworded by templates and rules); plus ``general`` questions
with computed answers (arithmetic, unit conversions, weekdays; :mod:`.trace_general`) and their
repeats and paraphrases, where answers left by the large model can spare later escalations.

Each user is an independent lazy stream (request times: a Poisson process over the days, waking
hours, one session per user and day); :func:`heapq.merge` interleaves them on ``ts``, so memory is
bounded by the number of users, not of requests. Kinds follow the configured mix per user by
deficit sampling (the kind furthest below its target share is likeliest, among the feasible ones:
a question only after its statement). Templates are data (``data/trace.json``); output is
deterministic for a seed.
"""

from __future__ import annotations

import heapq
import random
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from memroute.config.make_trace import MakeTraceConfig
from memroute.datasets.generate import synthetic
from memroute.datasets.generate._data import load
from memroute.datasets.generate.trace_general import draw_problem
from memroute.datasets.records import TraceRequest
from memroute.datasets.traces import _parse_ts
from memroute.types import Message

_DATA = load("trace")
PERSONAL: tuple[dict[str, Any], ...] = _DATA["personal"]
PREFIXES: tuple[str, ...] = _DATA["paraphrase"]["prefixes"]
SUFFIXES: tuple[str, ...] = _DATA["paraphrase"]["suffixes"]
_POOLS = synthetic.POOLS
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
DAY_S = 86_400
_WAKE_S, _AWAKE_S = 8 * 3600, 14 * 3600  # requests fall between 8:00 and 22:00 UTC
_RECENT_GENERAL = 64  # general questions a user may come back to (bounds each user's state)


def _date_after(rng: random.Random, ts: float) -> str:
    return synthetic.fmt_date(datetime.fromtimestamp(ts, tz=UTC) + timedelta(days=rng.randint(5, 90)))


# value maker of a personal template (its "value" key): (rng, ts of the statement) -> value
VALUE_MAKERS = {
    "code": lambda rng, ts: synthetic._code(rng),
    "pet": lambda rng, ts: rng.choice(_POOLS["pet"]),
    "full_name": lambda rng, ts: f"{rng.choice(_POOLS['person'])} {rng.choice(_POOLS['surname'])}",
    "date": _date_after,
    "day": lambda rng, ts: f"{rng.randint(1, 28)} {rng.choice(MONTHS)}",
    "clock": lambda rng, ts: synthetic._clock(rng),
    "city": lambda rng, ts: rng.choice(_POOLS["city"]),
    "budget": lambda rng, ts: synthetic._budget(rng),
    "vendor": lambda rng, ts: rng.choice(_POOLS["vendor"]),
}
_unknown = sorted({t["value"] for t in PERSONAL} - set(VALUE_MAKERS))
if _unknown:
    raise RuntimeError(f"trace.json personal values {_unknown} have no maker in VALUE_MAKERS")

Wording = tuple[int, int, int]  # (question template, prefix, suffix)


@dataclass
class Fact:
    """One thing a user can ask about: its question wordings, current value and superseded ones."""

    fact_id: str
    domain: str  # personal | general
    questions: tuple[str, ...]  # templates, {slots} filled in
    slots: dict[str, str]
    value: str
    template: dict[str, Any] | None = None  # personal: the data file's template
    stale: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # distinct texts asked so far, in order
    used: set[Wording] = field(default_factory=set)

    def text(self, w: Wording) -> str:
        question = self.questions[w[0]].format(**self.slots)
        prefix = PREFIXES[w[1]]
        if prefix:
            question = question[0].lower() + question[1:]
        return f"{prefix}{question}{SUFFIXES[w[2]]}"

    def ask(self, rng: random.Random, kind: str) -> str:
        """The question text of a ``novel`` / ``repeat`` / ``paraphrase`` ask."""
        if kind == "repeat":
            return rng.choice(self.asked)
        if kind == "novel":  # plainly worded: a template as written
            w: Wording = (rng.randrange(len(self.questions)), 0, 0)
        else:
            w = self._fresh_wording(rng)
        self.used.add(w)
        text = self.text(w)
        if text not in self.asked:
            self.asked.append(text)
        return text

    def _fresh_wording(self, rng: random.Random) -> Wording:
        shape = (len(self.questions), len(PREFIXES), len(SUFFIXES))
        for _ in range(32):
            w = (rng.randrange(shape[0]), rng.randrange(shape[1]), rng.randrange(shape[2]))
            if w not in self.used:
                return w
        last = self.asked[-1] if self.asked else None
        while True:  # every wording used: any that differs from the last one asked
            w = (rng.randrange(shape[0]), rng.randrange(shape[1]), rng.randrange(shape[2]))
            if self.text(w) != last or shape == (1, 1, 1):
                return w


@dataclass(frozen=True)
class _Plan:
    """Target share of each kind among all requests (from the mix and the shares)."""

    shares: dict[str, float]
    general_share: float

    @classmethod
    def of(cls, cfg: MakeTraceConfig) -> _Plan:
        g, u = cfg.general_share, cfg.update_share
        rep, par, nov = (cfg.mix.repeat / 100, cfg.mix.paraphrase / 100, cfg.mix.novel / 100)
        # each stated fact is asked once (novel), so statements ~ personal novel questions
        q = 1 / (1 + nov * (1 - g) * (1 + u))
        s = q * nov * (1 - g)
        shares = {"statement": s, "update": s * u, "novel_personal": q * nov * (1 - g),
                  "novel_general": q * nov * g, "repeat": q * rep, "paraphrase": q * par}
        return cls(shares, g)


def _deficit_pick(rng: random.Random, shares: dict[str, float], counts: Counter[str], n: int,
                  feasible: list[str]) -> str | None:
    weights = [max(0.0, shares[k] * (n + 1) - counts[k]) for k in feasible]
    if sum(weights) <= 0:
        weights = [shares[k] for k in feasible]
    if sum(weights) <= 0:
        return None
    return rng.choices(feasible, weights=weights)[0]


def _times(rng: random.Random, count: int, days: int, start: float) -> Iterator[tuple[int, int]]:
    """``count`` sorted uniform times over ``days`` (a Poisson process given its count), drawn
    one at a time as order statistics, mapped into waking hours: (epoch seconds, day index)."""
    x, span, prev = 0.0, float(days), -1
    for remaining in range(count, 0, -1):
        x += (span - x) * (1.0 - rng.random() ** (1.0 / remaining))
        day = min(int(x), days - 1)
        ts = max(int(start) + day * DAY_S + _WAKE_S + int((x - day) * _AWAKE_S), prev + 1)
        prev = ts
        yield ts, day


class _User:
    """One user's state: facts not yet stated, stated, asked; what a new request can be."""

    def __init__(self, uid: str, rng: random.Random) -> None:
        self.uid, self.rng = uid, rng
        self.free = [(t, s) for t in PERSONAL for s in t["subjects"]]
        rng.shuffle(self.free)
        self.unasked: deque[Fact] = deque()
        self.stated: list[Fact] = []
        self.asked: dict[str, list[Fact] | deque[Fact]] = {
            "personal": [], "general": deque(maxlen=_RECENT_GENERAL)}
        self.values: set[str] = set()
        self.general_n = 0
        self.domain_counts: Counter[str] = Counter()

    def _value(self, maker: str, ts: float, avoid: Iterable[str] = ()) -> str:
        avoid = set(avoid) | self.values
        for _ in range(64):
            value = VALUE_MAKERS[maker](self.rng, ts)
            if value not in avoid:
                break
        self.values.add(value)
        return value

    def feasible(self) -> list[str]:
        out = ["novel_general"]
        if self.free:
            out.append("statement")
        if self.asked["personal"]:  # a change is most telling once memory holds an answer
            out.append("update")
        if self.unasked:
            out.append("novel_personal")
        if self.asked["personal"] or self.asked["general"]:
            out += ["repeat", "paraphrase"]
        return out

    def statement(self, ts: float) -> tuple[str, Fact]:
        template, subject = self.free.pop()
        value = self._value(template["value"], ts)
        slug = subject.replace(" ", "-").replace("'", "")
        fact = Fact(f"{self.uid}/{template['key']}/{slug}", "personal", template["questions"],
                    {"subject": subject}, value, template)
        self.stated.append(fact)
        self.unasked.append(fact)
        return self.rng.choice(template["statement"]).format(subject=subject, value=value), fact

    def update(self, ts: float) -> tuple[str, Fact]:
        asked = self.asked["personal"]
        pool = asked if asked and self.rng.random() < 0.7 else self.stated  # mostly asked ones
        fact = self.rng.choice(pool)
        assert fact.template is not None
        new = self._value(fact.template["value"], ts, avoid=[fact.value, *fact.stale])
        fact.stale.append(fact.value)
        fact.value = new
        text = self.rng.choice(fact.template["update"])
        return text.format(subject=fact.slots["subject"], value=new), fact

    def novel(self, domain: str) -> Fact:
        if domain == "personal":
            fact = self.unasked.popleft()  # the oldest statement first: memory has to reach back
        else:
            self.general_n += 1
            questions, slots, answer = draw_problem(self.rng)
            fact = Fact(f"{self.uid}/g{self.general_n:04d}", "general", questions, slots, answer)
        self.asked[domain].append(fact)
        return fact

    def again(self, general_share: float) -> Fact:
        """A fact asked before, from the domain furthest below its share of questions."""
        total = sum(self.domain_counts.values()) + 1
        want_general = general_share * total - self.domain_counts["general"]
        want_personal = (1 - general_share) * total - self.domain_counts["personal"]
        if not self.asked["general"]:
            domain = "personal"
        elif not self.asked["personal"]:
            domain = "general"
        else:
            domain = "general" if want_general > want_personal else "personal"
        return self.rng.choice(self.asked[domain])


def _user_stream(index: int, count: int, cfg: MakeTraceConfig, plan: _Plan,
                 start: float) -> Iterator[tuple[int, dict[str, Any]]]:
    uid = f"user{index + 1:03d}"
    rng = random.Random(f"trace:{cfg.seed}:{uid}")
    user = _User(uid, rng)
    counts: Counter[str] = Counter()
    for n, (ts, day) in enumerate(_times(rng, count, cfg.days, start)):
        choice = _deficit_pick(rng, plan.shares, counts, n, user.feasible()) or "novel_general"
        counts[choice] += 1
        refs: tuple[str, ...] = ()
        stale: tuple[str, ...] = ()
        if choice in ("statement", "update"):
            text, fact = user.statement(ts) if choice == "statement" else user.update(ts)
            kind = choice
        else:
            if choice.startswith("novel_"):
                kind, fact = "novel", user.novel(choice.removeprefix("novel_"))
            else:
                kind, fact = choice, user.again(plan.general_share)
            text = fact.ask(rng, kind)
            user.domain_counts[fact.domain] += 1
            refs, stale = (fact.value,), tuple(fact.stale)
        yield ts, {
            "ts": float(ts), "tenant": cfg.tenant, "user_id": uid,
            "session_id": f"{uid}-d{day + 1:03d}",
            "messages": (Message(role="user", content=text),), "references": refs,
            "stale_references": stale, "kind": kind, "fact_id": fact.fact_id,
            "domain": fact.domain}


def _counts(rng: random.Random, total: int, users: int) -> list[int]:
    """Requests per user: lognormal activity (some users chat far more), largest remainder."""
    weights = [rng.lognormvariate(0.0, 0.75) for _ in range(users)]
    scale = total / sum(weights)
    raw = [w * scale for w in weights]
    out = [int(r) for r in raw]
    order = sorted(range(users), key=lambda i: (out[i] - raw[i], i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    return out


def number(stream: Iterable[tuple[Any, dict[str, Any]]]) -> Iterator[TraceRequest]:
    """Merged ``(ts, fields)`` pairs -> requests with ids ``r000000``, ``r000001``... in order."""
    for i, (_, fields) in enumerate(stream):
        yield TraceRequest(request_id=f"r{i:06d}", **fields)


FACTS_PER_USER = sum(len(t["subjects"]) for t in PERSONAL)


def requests_per_user_capacity(cfg: MakeTraceConfig) -> int:
    """How many requests a user can make before its facts run out and personal novel questions
    give way to general ones (the mix then drifts; activity varies, so heavy users get there at
    a third of this mean already)."""
    statement = _Plan.of(cfg).shares["statement"]
    return int(FACTS_PER_USER / statement) if statement > 0 else 10**9


def synthetic_trace(cfg: MakeTraceConfig) -> Iterator[TraceRequest]:
    """The built-in persistent-agent trace of ``cfg`` (validated), lazily, in time order."""
    cfg.validate()
    start = _parse_ts(cfg.start)
    counts = _counts(random.Random(f"trace:{cfg.seed}:users"), cfg.num_requests, cfg.num_users)
    plan = _Plan.of(cfg)
    streams = [_user_stream(i, c, cfg, plan, start) for i, c in enumerate(counts) if c]
    return number(heapq.merge(*streams, key=lambda item: item[0]))


@dataclass
class TraceSummary:
    """Counts of a request stream, gathered as it passes (:meth:`add` returns the request)."""

    requests: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    domains: Counter[str] = field(default_factory=Counter)
    users: set[tuple[str, str]] = field(default_factory=set)

    def add(self, req: TraceRequest) -> TraceRequest:
        self.requests += 1
        self.kinds[req.kind or "unlabelled"] += 1
        if req.domain:
            self.domains[req.domain] += 1
        self.users.add((req.tenant, req.user_id))
        return req

    def line(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))
        domains = ", ".join(f"{k} {v}" for k, v in sorted(self.domains.items()))
        return (f"{self.requests} requests ({kinds}; {domains or 'no domains'}), "
                f"{len(self.users)} users")


def summarize(requests: Iterable[TraceRequest]) -> TraceSummary:
    """Count a stream (e.g. :func:`memroute.datasets.replay_trace.iter_trace`) without keeping it."""
    summary = TraceSummary()
    for req in requests:
        summary.add(req)
    return summary
