"""The prompt layout for prefix caching, before / after (issue 28.3), from two replay runs of
the same trace that differ only in ``router.memory_position``:

    python -m jobs.replay trace=T strategies=[memroute] limit=120 session_history=true \
        router.memory_position=system +cascade.0.engine_args.disable_log_stats=false \
        +cascade.1.engine_args.disable_log_stats=false
    python -m jobs.replay ... router.memory_position=before_question
    python bench/bench_prefix_layout.py RUN_A RUN_B

Per run (memroute rows only): prompt tokens per request, the share the engines' prefix caches
served (vLLM's own count), the prefill tokens left, the probe's time to first token (vLLM's
stats), F1 on the scored requests with the paired difference's bootstrap 95 % interval (same
requests, so the noise is the answers' own), escalation, and EffCost@prod per request with
cached input at a 0 / 50 / 90 % discount (rows carry ``cached_prod``, so one run prices any).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / ".memroute" / "replays"
DISCOUNTS = (0.0, 0.5, 0.9)


def load(run: str) -> dict[int, dict]:
    path = Path(run)
    path = path if path.is_dir() else RUNS / run
    rows = [json.loads(line) for line in (path / "rows.jsonl").read_text().splitlines() if line]
    return {r["seq"]: r for r in rows if r["strategy"] == "memroute"}


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def summary(rows: list[dict], config_discount: float = 0.0) -> dict[str, float]:
    prompt = [r["tokens_base"] + r["tokens_injected"] + r.get("tokens_history", 0) for r in rows]
    cached = [r.get("tokens_cached", 0) for r in rows]
    ttft = [r["ttft_s"] for r in rows if r.get("ttft_s")]
    f1 = [r["f1"] for r in rows if r["f1"] is not None]
    out = {
        "n": len(rows), "prompt tok/req": statistics.mean(prompt),
        "cached %": 100 * sum(cached) / max(1, sum(prompt)),
        "prefill tok/req": statistics.mean(p - c for p, c in zip(prompt, cached)),
        "TTFT p50 ms": 1000 * pct(ttft, 0.5), "TTFT p95 ms": 1000 * pct(ttft, 0.95),
        "F1": 100 * statistics.mean(f1) if f1 else float("nan"),
        "esc %": 100 * statistics.mean(1.0 if r["escalated"] else 0.0 for r in rows),
    }
    for d in DISCOUNTS:
        out[f"EffCost@prod/req d={d:g}"] = statistics.mean(
            r["eff_cost_prod"] + (config_discount - d) * r.get("cached_prod", 0.0) for r in rows)
    return out


def paired_f1(a: dict[int, dict], b: dict[int, dict], n_boot: int = 2000) -> tuple[float, float, float]:
    """Mean F1 difference b - a over requests scored in both, and its bootstrap 95 % interval."""
    diffs = [b[s]["f1"] - a[s]["f1"] for s in a if s in b and a[s]["f1"] is not None
             and b[s]["f1"] is not None]
    rng = random.Random(0)
    boots = sorted(statistics.mean(rng.choices(diffs, k=len(diffs))) for _ in range(n_boot))
    return (100 * statistics.mean(diffs), 100 * boots[int(0.025 * n_boot)],
            100 * boots[int(0.975 * n_boot)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="replay run (folder or run id): router.memory_position=system")
    ap.add_argument("after", help="replay run: router.memory_position=before_question")
    args = ap.parse_args(argv)
    a, b = load(args.before), load(args.after)
    common = sorted(set(a) & set(b))
    if not common:
        print("the two runs share no memroute request", file=sys.stderr)
        return 2
    rows = {"system (before)": [a[s] for s in common], "before_question (after)": [b[s] for s in common]}
    table = {name: summary(rs) for name, rs in rows.items()}
    cols = list(next(iter(table.values())))
    print("| layout | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for name, t in table.items():
        print(f"| {name} | " + " | ".join(f"{t[c]:,.1f}" for c in cols) + " |")
    mean, lo, hi = paired_f1(a, b)
    print(f"\nF1 after - before, paired over the scored requests: {mean:+.1f} "
          f"(bootstrap 95 % interval {lo:+.1f} .. {hi:+.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
