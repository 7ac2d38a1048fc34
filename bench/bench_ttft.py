"""Time to first token of streamed answers, accepted at the probe vs escalated, over real HTTP.

    python bench/bench_ttft.py [--preset cpu-tiny] [--requests 8] [--max-tokens 48]

The preset's app (``jobs.serve.start``, what ``make serve`` runs) on a loopback Ray node; one
client, sequential, ``stream: true``, memory off (so every request has the same prompt size).
Accepted: ``tau 0`` (the probe's answer always stands: its tokens are held until its confidence is
known, then sent). Escalated: ``tau 1`` (no probe is confident enough: the last tier streams as it
generates). Printed per kind: time to the first content token and to the last, p50 / p95, and the
share of the answer's time the client already had text (1 - TTFT / total).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machine import machine_info  # noqa: E402

KEY = "sk-ttft"
QUESTIONS = ["Tell me about the sea.", "Describe a forest in autumn.", "What makes a good friend?",
             "Explain how rain forms.", "Describe a busy market.", "What is a volcano?",
             "Tell me about mountains.", "Describe a city at night."]


def one(client, question: str, tau: float, max_tokens: int) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    first, report = None, {}
    stream = client.chat.completions.create(
        model="memroute", stream=True, max_tokens=max_tokens, user="ttft",
        messages=[{"role": "user", "content": question}],
        extra_body={"memroute": {"store": False, "use_memory": False, "tau": tau}})
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - t0
        report = (chunk.model_extra or {}).get("memroute") or report
    return first or float("nan"), time.perf_counter() - t0, report


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="cpu-tiny")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=48)
    args = ap.parse_args()

    import openai
    import ray
    from ray import serve

    from jobs.serve import start
    from memroute.config.compose import compose_serve_config
    from tests.integration.serving import free_port, wait_healthy

    os.environ["MEMROUTE_API_KEYS"] = f"{KEY}:bench"
    tmp = Path(tempfile.mkdtemp(prefix="ttft-"))
    cfg = compose_serve_config(args.preset, [f"http.port={free_port()}",
                                             f"journal.path={tmp / 'journal.sqlite3'}",
                                             f"memory.uri={tmp / 'milvus.db'}"])
    cfg = replace(cfg, blocking=False, api=replace(cfg.api, api_keys={KEY: "bench"}))
    try:
        url = start(cfg)
        wait_healthy(url, timeout=400)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, timeout=300, max_retries=0)
        one(client, "Warm up.", 1.0, 8)  # first calls compile / allocate
        rows = {}
        for kind, tau in (("accepted at the probe", 0.0), ("escalated", 1.0)):
            got = [one(client, QUESTIONS[i % len(QUESTIONS)], tau, args.max_tokens)
                   for i in range(args.requests)]
            assert all(r["escalated"] == (tau == 1.0) for _, _, r in got), "tau did not decide"
            rows[kind] = got
    finally:
        serve.shutdown()
        ray.shutdown()
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_info(("vllm", "ray")).items()))
    print(f"preset {args.preset}, {args.requests} streamed requests per kind, max_tokens "
          f"{args.max_tokens}, memory off\n")
    print("| answer | TTFT p50 | TTFT p95 | total p50 | total p95 | text already shown |")
    print("|---|---|---|---|---|---|")
    for kind, got in rows.items():
        ttft, total = [g[0] for g in got], [g[1] for g in got]
        shown = statistics.median(1 - f / t for f, t in zip(ttft, total))
        print(f"| {kind} | {pct(ttft, .5):.2f} s | {pct(ttft, .95):.2f} s | {pct(total, .5):.2f} s "
              f"| {pct(total, .95):.2f} s | {shown:.0%} |")


if __name__ == "__main__":
    main()
