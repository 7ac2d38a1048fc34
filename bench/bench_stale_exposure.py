"""How often a superseded value reaches the prompt, with and without supersession, on real parts.

The replay's stale answers start here: after an update, the question's retrieved memories still
hold the old value. This walks a generated trace in time order through the real write and read
path (MiniLM, Milvus Lite, ``HybridRetriever``: ``remember`` marks superseded pairs when
``retrieval.supersede`` is on), storing each request as the turn-pair a correct model would
leave (statements and updates answered "Noted.", questions with their reference). Before each
question asked after an update it retrieves the top_k memories and counts whether any of them
holds a superseded value (stale exposure) and whether one holds the current value. No model is
called, so the figures are about what the prompt offers, not about what a model answers.

    .venv/bin/python bench/bench_stale_exposure.py --seed 0 --update-share 0.2
    .venv/bin/python bench/bench_stale_exposure.py --seed 2 --update-share 0.4
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

from memroute import build
from memroute.assets.store import AssetStore
from memroute.config.make_trace import MakeTraceConfig
from memroute.config.schema import EmbedderConfig, MemoryConfig, RetrievalConfig
from memroute.datasets.generate.trace_sources import generate_trace
from memroute.types import TurnPair


def holds(texts: list[str], values: tuple[str, ...]) -> bool:
    low = [t.lower() for t in texts]
    return any(v.lower() in t for v in values for t in low)


def run(enc, trace: list, supersede: bool, top_k: int, folder: Path) -> dict[str, float]:
    store = build.store(MemoryConfig(uri=str(folder / f"m{int(supersede)}.db")), enc.dim)
    r = build.retriever(enc, store, RetrievalConfig(top_k=top_k, supersede=supersede))
    asked = exposed = current = 0
    t0 = time.perf_counter()
    for seq, req in enumerate(tqdm(trace, desc=f"supersede={supersede}", leave=False)):
        uid, text = f"{req.tenant}:{req.user_id}", req.messages[-1].content
        question = req.kind not in ("statement", "update")
        if question and req.stale_references:
            hits = [h.memory.text for h in r.retrieve(uid, text, question_time=req.ts)]
            asked += 1
            exposed += holds(hits, req.stale_references)
            current += holds(hits, req.references)
        answer = req.references[0] if question and req.references else "Noted."
        r.remember([TurnPair(uid, req.session_id, seq, text, answer, int(req.ts),
                             created_at=req.ts)])
    store.close()
    return {"asked": asked, "stale %": 100 * exposed / max(1, asked),
            "current %": 100 * current / max(1, asked), "s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--update-share", type=float, default=0.2)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--supersede", choices=["both", "on", "off"], default="both")
    args = ap.parse_args()
    cfg = MakeTraceConfig(seed=args.seed, update_share=args.update_share, num_users=args.users,
                          num_requests=args.requests, progress=False)
    trace = list(generate_trace(cfg))
    enc = build.encoder(EmbedderConfig(), AssetStore())
    with tempfile.TemporaryDirectory() as tmp:
        for supersede in {"both": (False, True), "on": (True,), "off": (False,)}[args.supersede]:
            s = run(enc, trace, supersede, args.top_k, Path(tmp))
            print(f"| {args.seed} | {args.update_share} | {len(trace)} | {s['asked']} | "
                  f"{'on' if supersede else 'off'} | {s['stale %']:.1f} | {s['current %']:.1f} | "
                  f"{s['s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
