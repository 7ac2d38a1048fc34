"""HTTP replay vs in-process replay of the same trace, same concurrency, mock tiers.

    .venv/bin/python bench/bench_replay_http.py [--users 20] [--requests 300] [--concurrency 8]

Both sides replay memroute (memory + routing) from empty memory: in-process through the Router,
over HTTP through the Serve app (mock tiers, MiniLM, Milvus Lite, journal) and the ``openai``
client. The mock's model time is ~0, so the ratio is the serving path's own cost (proxy, ingress,
handles, journal, flusher) against the bare Router: a floor for what real models would show.
Wave latency: the time until all answers of a wave (distinct users, sent together) are back.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import machine_info  # noqa: E402

KEY = "sk-bench"


def models():
    from memroute.config.schema import ModelConfig

    rules = [{"memories": True, "logprob": -0.05}]
    return [ModelConfig(name="mock-small", engine="mock", params_b=0.5, price_as_params_b=8,
                        engine_args={"logprob": -2.9, "rules": rules}),
            ModelConfig(name="mock-large", engine="mock", params_b=8.0, price_as_params_b=235)]


def serve_config(tmp: Path, port: int):
    from memroute.config.api import ApiConfig
    from memroute.config.journal import JournalConfig
    from memroute.config.schema import MemoryConfig, RouterConfig
    from memroute.config.serve import AutoscalingConfig, HttpConfig, IngressConfig, ServeConfig, TierDeployConfig

    one = AutoscalingConfig(min_replicas=1, max_replicas=1)
    small, large = models()
    return ServeConfig(
        http=HttpConfig(port=port), ingress=IngressConfig(num_cpus=0.25, autoscaling=one),
        cascade={"0": small, "1": large},
        deploy={str(i): TierDeployConfig(num_cpus=0.25, autoscaling=one) for i in range(2)},
        memory=MemoryConfig(uri=str(tmp / "served.db"), collection="bench_replay"),
        router=RouterConfig(tau=0.5, max_tokens=24), journal=JournalConfig(path=str(tmp / "journal.sqlite3")),
        api=ApiConfig(api_keys={KEY: "default"}), blocking=False,
    )


def summary(name: str, rows: list[dict], wall: float) -> dict:
    per_wave = [r["wall_s"] * n for r, n in _wave_sizes(rows)]
    return {"side": name, "requests": len(rows), "wall_s": round(wall, 1), "req/s": round(len(rows) / wall, 2),
            "wave p50 ms": round(1000 * statistics.median(per_wave), 0),
            "wave p95 ms": round(1000 * sorted(per_wave)[int(0.95 * (len(per_wave) - 1))], 0),
            "waves": len(per_wave)}


def _wave_sizes(rows: list[dict]) -> list[tuple[dict, int]]:
    """(first row, size) per wave: rows of one wave are consecutive and share wall_s."""
    out: list[tuple[dict, int]] = []
    for r in rows:
        if out and out[-1][0]["wall_s"] == r["wall_s"]:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((r, 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_info(("ray", "pymilvus", "openai")).items()))

    from openai import OpenAI

    from memroute import build
    from memroute.config import EmbedderConfig
    from memroute.config.make_trace import MakeTraceConfig
    from memroute.config.replay import ReplayConfig
    from memroute.config.schema import AssetsConfig, MemoryConfig, RetrievalConfig, RouterConfig
    from memroute.datasets.generate.trace_sources import generate_trace
    from memroute.eval.replay.driver import Checkpoint, replay_strategy
    from memroute.eval.replay.http_target import replay_http
    from memroute.eval.replay.outcome import TierPrice
    from memroute.eval.replay.strategies import STRATEGIES, StrategyParts
    from tests.integration.serving import deployed, free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench_replay_http_"))
    trace = list(generate_trace(MakeTraceConfig(num_users=args.users, num_requests=args.requests,
                                                tenant="default", progress=False)))
    prices = [TierPrice(m.params_b, m.price_as_params_b or m.params_b) for m in models()]

    assets = build.asset_store(AssetsConfig())
    memory = build.memory(EmbedderConfig(), MemoryConfig(uri=str(tmp / "inproc.db")), RetrievalConfig(), assets)
    parts = StrategyParts(build.tiers(models(), assets), prices, RouterConfig(tau=0.5, max_tokens=24),
                          RetrievalConfig(), memory.retriever)
    t0 = time.perf_counter()
    local = replay_strategy(STRATEGIES.get("memroute")("memroute", parts), trace,
                            Checkpoint(tmp / "inproc.jsonl"), concurrency=args.concurrency)
    local_wall = time.perf_counter() - t0
    memory.close()

    port = free_port()
    with deployed(serve_config(tmp, port), port) as up:
        client = OpenAI(base_url=f"{up['url']}/v1", api_key=KEY, timeout=120, max_retries=0)
        cfg = ReplayConfig(trace="unused", target=up["url"], strategies=["memroute"], concurrency=args.concurrency)
        log = Checkpoint(tmp / "http.jsonl")
        t0 = time.perf_counter()
        replay_http(cfg, prices, trace, log, run="bench", progress=False, client=client)
        http_wall = time.perf_counter() - t0
    rows = [summary("in-process", local, local_wall), summary("http", log.rows, http_wall)]
    same = sum(a["tier"] == b["tier"] for a, b in zip(sorted(local, key=lambda r: r["seq"]),
                                                        sorted(log.rows, key=lambda r: r["seq"])))
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    print(f"\nHTTP / in-process: {rows[1]['req/s'] / rows[0]['req/s']:.2f}x requests/s; wave p50 "
          f"{rows[1]['wave p50 ms'] / max(1, rows[0]['wave p50 ms']):.2f}x, p95 "
          f"{rows[1]['wave p95 ms'] / max(1, rows[0]['wave p95 ms']):.2f}x; same tier on {same}/{len(trace)} requests")
    return 0


if __name__ == "__main__":
    sys.exit(main())
