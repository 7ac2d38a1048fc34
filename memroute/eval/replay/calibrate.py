"""Pick the router's ``tau`` from a shadow replay: the cheapest threshold that reaches a quality target.

A shadow sample is one request that every tier answered on its own, with the same memories (the
replay's ``shadow_share``). Replaying the cascade's decision on it for a candidate ``tau`` is then
arithmetic: tier ``t`` answers when it is the first whose confidence is >= tau (the last tier
always answers), and the cost is that of every tier tried up to it. Calibration fits on one half
of the users and reports on the other, so the chosen tau is judged on users it never saw. The same
samples estimate how often the cheap tier is *confidently wrong*: accepted, while the last tier's
answer disagrees with it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from memroute.errors import ConfigError
from memroute.eval.metrics import f1

DEFAULT_TAUS = tuple(round(0.05 * i, 2) for i in range(21))  # 0.00, 0.05, ..., 1.00
DISAGREE_BELOW = 0.5  # F1 between two tiers' answers under this: they disagree


@dataclass(frozen=True)
class ShadowSample:
    request_id: str
    user_id: str
    answers: tuple[str, ...]  # one per tier, cheapest first
    confidences: tuple[float, ...]
    f1: tuple[float, ...]  # each tier's answer against the references
    eff_cost: tuple[float, ...]  # each tier's call alone


@dataclass(frozen=True)
class PolicyResult:
    tau: float
    n: int
    f1: float
    eff_cost: float
    escalation_rate: float
    confidently_wrong: float  # accepted on tier 0 while the last tier disagrees


def evaluate(samples: Sequence[ShadowSample], tau: float) -> PolicyResult:
    if not samples:
        raise ConfigError("no shadow samples: replay with shadow_share > 0 first", field="run_id")
    total_f1 = total_cost = 0.0
    escalated = wrong = 0
    for s in samples:
        last = len(s.answers) - 1
        t = next((i for i, c in enumerate(s.confidences) if i == last or c >= tau), last)
        total_f1 += s.f1[t]
        total_cost += sum(s.eff_cost[: t + 1])
        escalated += t > 0
        wrong += t == 0 and last > 0 and f1(s.answers[0], s.answers[last]) < DISAGREE_BELOW
    n = len(samples)
    return PolicyResult(tau, n, total_f1 / n, total_cost / n, escalated / n, wrong / n)


def pick_tau(samples: Sequence[ShadowSample], *, target_f1: float | None = None,
             target_share: float | None = None, taus: Sequence[float] = DEFAULT_TAUS) -> PolicyResult:
    """The cheapest tau whose F1 reaches ``target_f1``, or ``target_share`` of the F1 the last tier
    alone gets (tau above every confidence); ties go to the higher F1. If no tau reaches the
    target, the one with the highest F1."""
    if (target_f1 is None) == (target_share is None):
        raise ConfigError("give exactly one of target_f1 and target_share", field="target_share")
    if target_share is not None:
        large = sum(s.f1[-1] for s in samples) / max(1, len(samples))
        target = target_share * large
    else:
        target = float(target_f1)  # type: ignore[arg-type]
    results = [evaluate(samples, t) for t in taus]
    good = [r for r in results if r.f1 >= target - 1e-12]
    if not good:
        return max(results, key=lambda r: (r.f1, -r.eff_cost))
    return min(good, key=lambda r: (r.eff_cost, -r.f1))


def split_users(samples: Sequence[ShadowSample]) -> tuple[list[ShadowSample], list[ShadowSample]]:
    """Fit / held-out halves by a hash of the user id: stable, and no user in both."""
    fit, held = [], []
    for s in samples:
        half = hashlib.sha256(s.user_id.encode()).digest()[0] % 2
        (fit if half == 0 else held).append(s)
    return fit, held
