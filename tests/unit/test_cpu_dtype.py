"""dtype auto on a CPU: bfloat16 only with native bf16, the KV-cache default sized to match."""

from __future__ import annotations

from memroute.llm.cpu_dtype import cpu_dtype, cpu_flags, kv_cache_gib

SAPPHIRE = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
ZEN3 = "processor\t: 0\nflags\t\t: fpu sse avx avx2 fma\n"


def test_auto_is_bfloat16_only_with_native_bf16(tmp_path):
    for text, want in ((SAPPHIRE, "bfloat16"), (ZEN3, "float32")):
        info = tmp_path / "cpuinfo"
        info.write_text(text)
        assert cpu_dtype("auto", cpu_flags(info)) == want
    assert cpu_dtype("auto", {"avx512f"}) == "float32"  # AVX512 without BF16: emulated, slow
    assert cpu_dtype("float16", {"amx_bf16"}) == "float16"  # an explicit choice is kept
    assert cpu_flags(tmp_path / "missing") == frozenset()


def test_the_kv_cache_default_holds_the_same_tokens_in_either_dtype():
    assert kv_cache_gib("float32") == 2 * kv_cache_gib("bfloat16")


def test_vllm_cpu_defaults_follow_the_dtype(monkeypatch):
    import os

    from memroute.llm.vllm_backend import apply_cpu_env_defaults

    monkeypatch.setattr(os, "environ", dict(os.environ))  # what it sets stays in this test
    os.environ.pop("VLLM_CPU_KVCACHE_SPACE", None)
    assert apply_cpu_env_defaults("float32")["VLLM_CPU_KVCACHE_SPACE"] == "2"
    os.environ["VLLM_CPU_KVCACHE_SPACE"] = "5"  # a user's setting wins
    assert "VLLM_CPU_KVCACHE_SPACE" not in apply_cpu_env_defaults("float32")
