"""Where the prompt tokens go in a multi-turn conversation: base / injected memory / history / output.

    python bench/bench_history_share.py [--locomo ../shared/data/locomo/locomo10.json]
                                        [--sample conv-26] [--turns 120]

An agent keeps its chat: request k of one session carries the k-1 earlier questions and answers
as history (what an unmodified OpenAI client sends), and memroute adds the user's memories
(LoCoMo conv-26's turn-pairs, ingested into Milvus Lite, hybrid retrieval, MiniLM). Engines are
the deterministic mock with the *real* tokenizers of the cpu preset (Qwen2.5-0.5B probe with a
4,096-token context, Qwen2.5-1.5B escalation with 32,768), so every count is exact and the run
takes seconds; the mock answers with its latest memory's answer and escalates "when" questions.
Printed: each component's share of all tokens per band of turns, the history's growth, and
where the probe's context starts trimming it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402

BANDS = ((1, 5), (6, 15), (16, 30), (31, 60), (61, 90), (91, 10**6))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--locomo", default="../shared/data/locomo/locomo10.json")
    ap.add_argument("--sample", default="conv-26")
    ap.add_argument("--turns", type=int, default=120)
    args = ap.parse_args()

    from memroute import build
    from memroute.accounting.cost import Pricing
    from memroute.assets.store import AssetStore
    from memroute.config import RetrievalConfig, RouterConfig
    from memroute.config.schema import EmbedderConfig, MemoryConfig
    from memroute.datasets.locomo import load_locomo, turn_pairs
    from memroute.llm.mock_backend import MockBackend
    from memroute.routing.router import RouteRequest, Router, Tier
    from memroute.types import Message

    t0 = time.perf_counter()
    assets = AssetStore()
    [conv] = load_locomo(args.locomo, sample_ids=[args.sample])
    user = "bench-user"
    retrieval = RetrievalConfig()
    with tempfile.TemporaryDirectory() as tmp:
        mem = build.memory(EmbedderConfig(), MemoryConfig(uri=str(Path(tmp) / "m.db")), retrieval, assets)
        mem.retriever.remember([r.pair for r in turn_pairs(conv, user_id=user)])
        mem.store.flush()
        rules = [{"match": "(?i)^when\\b", "logprob": -2.5}]
        small = MockBackend("qwen2.5-0.5b", assets.hf_folder("qwen2.5-0.5b"), rules=rules)
        large = MockBackend("qwen2.5-1.5b", assets.hf_folder("qwen2.5-1.5b"), logprob=-0.01)
        tiers = [Tier("small", small, Pricing(8), context_tokens=4096),
                 Tier("large", large, Pricing(235), context_tokens=32768)]
        router = Router(tiers, RouterConfig(store_answers=False), retrieval, mem.retriever)
        history: list[Message] = []
        rows = []
        for k, qa in enumerate(conv.qa[: args.turns], start=1):
            res = router.route_many([RouteRequest(user, qa.question, history=tuple(history))])[0]
            for c in res.calls:
                rows.append((k, c.tier, c.base_prompt_tokens, c.injected_tokens, c.history_tokens,
                             c.output_tokens))
            history += [Message("user", qa.question), Message("assistant", res.answer)]
        mem.store.close()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_info(()).items()))
    print(f"{args.sample}: {len(conv.qa[: args.turns])} turns, {len(rows)} calls, "
          f"{time.perf_counter() - t0:.0f} s\n")
    print("| turns | calls | base | injected memory | history | output | history tokens / call |")
    print("|---|---|---|---|---|---|---|")
    for lo, hi in BANDS:
        band = [r for r in rows if lo <= r[0] <= hi]
        if not band:
            continue
        total = sum(sum(r[2:]) for r in band)
        share = [sum(r[i] for r in band) / total for i in (2, 3, 4, 5)]
        label = f"{lo}-{min(hi, rows[-1][0])}"
        print(f"| {label} | {len(band)} | " + " | ".join(f"{s:.0%}" for s in share)
              + f" | {sum(r[4] for r in band) / len(band):.0f} |")
    total = sum(sum(r[2:]) for r in rows)
    share = [sum(r[i] for r in rows) / total for i in (2, 3, 4, 5)]
    print(f"| all | {len(rows)} | " + " | ".join(f"{s:.0%}" for s in share)
          + f" | {sum(r[4] for r in rows) / len(rows):.0f} |")
    probe = [r for r in rows if r[1] == 0]
    trimmed = next((b for a, b in zip(probe, probe[1:]) if b[4] <= a[4]), None)
    peak = max(probe, key=lambda r: r[4])
    print(f"\nprobe history: at most {peak[4]} tokens (turn {peak[0]}); " + (
        f"its 4,096-token context starts trimming the oldest turns at turn {trimmed[0]}"
        if trimmed else "never trimmed within these turns"))


if __name__ == "__main__":
    main()
