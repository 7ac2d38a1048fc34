"""vLLM-CPU prefill and decode speed per dtype, same prompts, one process per dtype.

    python bench/bench_vllm_dtype.py [--model qwen2.5-0.5b] [--dtypes float32 bfloat16]

Prefill: 16 prompts of ~120 tokens, one generated token each. Decode: 8 sequences and 1 sequence
of 32 tokens (ignore_eos). Each measurement runs twice in its process and the second is reported
(the first pays warm-up). On CPUs without AVX-512 bf16, bfloat16 matmuls are emulated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_info  # noqa: E402


def measure(model: str, dtype: str) -> dict[str, float]:
    from memroute.assets.store import AssetStore
    from memroute.llm.vllm_backend import apply_cpu_env_defaults

    apply_cpu_env_defaults()
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(AssetStore().hf_folder(model)), dtype=dtype, max_model_len=2048, enforce_eager=True)
    body = "Caroline said she loves the sunset painting she made at the lake with the kids last week. " * 6
    prefill = [f"Question: what did Melanie paint recently?\n\nExcerpt: {body} {i}" for i in range(16)]
    out: dict[str, float] = {}
    for _ in range(2):  # the second run is reported
        t = time.perf_counter()
        res = llm.generate(prefill, SamplingParams(max_tokens=1), use_tqdm=False)
        out["prefill_tok_s"] = sum(len(r.prompt_token_ids) for r in res) / (time.perf_counter() - t)
        for n in (8, 1):
            prompts = [f"Write a short story about a cat number {i}." for i in range(n)]
            t = time.perf_counter()
            res = llm.generate(prompts, SamplingParams(max_tokens=32, temperature=0, ignore_eos=True),
                               use_tqdm=False)
            out[f"decode_{n}_tok_s"] = sum(len(r.outputs[0].token_ids) for r in res) / (time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode: measure one dtype, print JSON
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(measure(args.model, args.one)), flush=True)
        return
    print("machine:", ", ".join(f"{k}={v}" for k, v in machine_info(("torch", "vllm")).items()))
    print(f"| {args.model} dtype | prefill tok/s | decode x8 tok/s | decode x1 tok/s |\n|---|---|---|---|")
    for dtype in args.dtypes:  # a fresh process each: one vLLM engine per process on CPU
        run = subprocess.run([sys.executable, __file__, "--model", args.model, "--one", dtype],
                             capture_output=True, text=True, check=True)
        r = json.loads(next(ln for ln in run.stdout.splitlines() if ln.startswith("RESULT "))[7:])
        print(f"| {dtype} | {r['prefill_tok_s']:.0f} | {r['decode_8_tok_s']:.1f} | {r['decode_1_tok_s']:.1f} |")


if __name__ == "__main__":
    main()
