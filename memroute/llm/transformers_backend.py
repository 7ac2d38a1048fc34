"""Hugging Face transformers back end: always available, no compiling, slowest.

Loads a converted safetensors folder (``AssetStore.hf_folder``), never the GGUF itself: GGUF
dequantization at every load is slow. Per-token log-probs are ``log_softmax`` of the raw logits
of each generated step (``output_logits=True``), so they match vLLM's default raw log-probs.
See :mod:`memroute.llm.replies` for the conventions shared by all back ends.

:class:`~memroute.llm.options.GenerationOptions`: ``top_p`` applies when sampling
(``temperature > 0``); ``seed`` makes sampling reproducible per prompt (each seeded prompt runs
alone under ``torch.manual_seed(seed)``, inside ``torch.random.fork_rng`` so the process's
generator is left as it was); ``presence_penalty`` / ``frequency_penalty`` are a logits processor
with OpenAI's semantics (:class:`PenaltyProcessor`); ``logprobs`` / ``top_logprobs`` come from the
top-k of the same ``log_softmax``; tools are rendered by :func:`~memroute.llm.chat.chat_prompt_ids`
and the output parsed by :func:`~memroute.llm.tool_calls.parse_tool_calls`. ``tool_choice``
``required`` / a named function is an instruction in the prompt, not constrained decoding.

:meth:`TransformersBackend.stream` runs ``generate`` in a worker thread with a streamer and
yields text deltas as the tokens arrive, then the reply of that same ``generate`` call.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from memroute.errors import AssetError, BackendError, InvalidRequest
from memroute.llm.chat import chat_prompt_ids, options_tools, text_token_count
from memroute.llm.prefix_cache import PrefixCounter
from memroute.llm.options import MAX_TOP_LOGPROBS, GenerationOptions
from memroute.llm.replies import apply_tool_calls, cut_at_stop, top_n
from memroute.llm.streaming import StreamText
from memroute.llm.transformers_folder import check_folder
from memroute.llm.transformers_hooks import (
    Cancelled,
    PenaltyProcessor,
    QueueStreamer,
    step_logprobs,
)
from memroute.types import Message, ModelReply

_DTYPES = ("float32", "bfloat16", "float16")


_DONE = object()


class TransformersBackend:
    """A causal LM run with ``model.generate``; greedy when ``temperature == 0``.

    ``generate_many`` runs the batch in one left-padded ``generate`` call when
    ``batch_generate`` is true (greedy texts equal the one-by-one results; log-probs differ only
    by float rounding), else one prompt at a time.
    """

    def __init__(
        self,
        model_id: str,
        path: str | Path,
        *,
        dtype: str = "float32",
        num_threads: int | None = None,
        batch_generate: bool = True,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        if dtype == "auto":  # eager PyTorch on a CPU: float32 is its fast, exact path
            dtype = "float32"
        if dtype not in _DTYPES:
            raise InvalidRequest(
                f"dtype {dtype!r} is not supported: use one of auto, {', '.join(_DTYPES)}",
                field="model.dtype",
            )
        folder = check_folder(path)
        if num_threads:
            torch.set_num_threads(num_threads)  # process-wide: torch has no per-model setting
        self.model_id = model_id
        self.path = folder
        self.batch_generate = batch_generate
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # this engine caches no prefix: the count is what a prefix-caching engine would skip
        self.prefix_cache = PrefixCounter()
        self.model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=getattr(torch, dtype)
        ).eval()

        eos: set[int] = set()
        for ids in (self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(ids, int):
                eos.add(ids)
            elif ids:
                eos.update(int(i) for i in ids)
        if not eos:
            raise AssetError(f"model folder {str(folder)!r} defines no end-of-sequence token")
        self._eos_ids = sorted(eos)
        pad = self.tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else self._eos_ids[0]
        # A clean generation config: a model folder's own sampling defaults (Qwen ships
        # repetition_penalty / top_k / top_p) must not leak into greedy decoding, or this
        # engine would disagree with vLLM, which only applies the SamplingParams it is given.
        self.model.generation_config = GenerationConfig(
            bos_token_id=self.model.generation_config.bos_token_id,
            eos_token_id=self._eos_ids,
            pad_token_id=self._pad_id,
        )

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
        prompt = self._prompt(messages, options)
        return self._run([prompt], max_tokens, stop, temperature, options)[0]

    def generate_many(
        self,
        batch: Sequence[Sequence[Message]],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> list[ModelReply]:
        prompts = [self._prompt(m, options) for m in batch]
        if not prompts:
            return []
        if self.batch_generate:
            return self._run(prompts, max_tokens, stop, temperature, options)
        return [self._run([p], max_tokens, stop, temperature, options)[0] for p in prompts]

    def stream(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 32,
        stop: Sequence[str] | None = None,
        temperature: float = 0.0,
        options: GenerationOptions | None = None,
    ) -> Iterator[str | ModelReply]:
        """Text deltas while ``generate`` runs in a worker thread, then its reply.

        Closing the iterator early stops the generation at the next step.
        """
        prompt = self._prompt(messages, options)
        self._check_args(max_tokens, temperature)
        tokens: queue.Queue = queue.Queue()
        cancel = threading.Event()
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                result["reply"] = self._run([prompt], max_tokens, stop, temperature, options,
                                            streamer=QueueStreamer(tokens), cancel=cancel)[0]
            except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer
                result["error"] = exc
            finally:
                tokens.put(_DONE)

        worker = threading.Thread(target=work, name=f"stream-{self.model_id}", daemon=True)
        worker.start()
        text = StreamText(stop, bool(options and options.tools_on))
        ids: list[int] = []
        ended = False
        try:
            while True:
                item = tokens.get()
                if item is _DONE:
                    break
                if ended:
                    continue
                for t in item:
                    if t in self._eos_ids:
                        ended = True
                        break
                    ids.append(t)
                delta = text.update(self.tokenizer.decode(ids, skip_special_tokens=True))
                if delta:
                    yield delta
        finally:
            cancel.set()
            worker.join()
        if "error" in result:
            raise result["error"]
        reply = result["reply"]
        yield from text.ending(reply)

    def count_tokens(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> int:
        return len(chat_prompt_ids(self.tokenizer, messages, tools, tool_choice))

    def count_text_tokens(self, text: str) -> int:
        return text_token_count(self.tokenizer, text)

    def close(self) -> None:
        import gc

        self.model = None  # type: ignore[assignment]
        gc.collect()

    # -- extras ---------------------------------------------------------------------------

    def score_completion(
        self, messages: Sequence[Message], completion_ids: Sequence[int]
    ) -> list[float]:
        """Teacher-forced log p of each token of ``completion_ids`` after the chat prompt.

        Lets another engine's generated tokens be scored by this model (cross-engine checks,
        forced-answer confidence).
        """
        import torch

        prompt = chat_prompt_ids(self.tokenizer, messages)
        ids = torch.tensor([prompt + [int(t) for t in completion_ids]])
        with torch.inference_mode():
            logits = self.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
        target = ids[0, len(prompt) :]
        return logp.gather(1, target[:, None])[:, 0].tolist()

    # -- internals ------------------------------------------------------------------------

    def _prompt(self, messages: Sequence[Message], options: GenerationOptions | None) -> list[int]:
        tools, tool_choice = options_tools(options)
        return chat_prompt_ids(self.tokenizer, messages, tools, tool_choice)

    def _check_args(self, max_tokens: int, temperature: float) -> None:
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive integer, got {max_tokens!r}",
                                 field="max_tokens")
        if temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {temperature!r}",
                                 field="temperature")

    def _run(
        self,
        prompts: list[list[int]],
        max_tokens: int,
        stop: Sequence[str] | None,
        temperature: float,
        options: GenerationOptions | None = None,
        *,
        streamer: Any = None,
        cancel: threading.Event | None = None,
    ) -> list[ModelReply]:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        self._check_args(max_tokens, temperature)
        if self.model is None:
            raise BackendError(f"back end {self.model_id!r} is closed")
        opts = options or GenerationOptions()
        seeded = opts.seed is not None and temperature > 0
        if seeded and len(prompts) > 1:  # a seed is per request: each prompt samples alone
            return [self._run([p], max_tokens, stop, temperature, options)[0] for p in prompts]
        stop = [s for s in (stop or ()) if s]
        width = max(len(p) for p in prompts)
        # Left padding keeps every prompt's last token at the same position for generation.
        input_ids = torch.tensor([[self._pad_id] * (width - len(p)) + p for p in prompts])
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        sampling: dict[str, Any] = (
            {"do_sample": True, "temperature": float(temperature), "top_k": 0,
             "top_p": float(opts.top_p)}
            if temperature > 0
            else {"do_sample": False}
        )
        config = GenerationConfig(
            max_new_tokens=max_tokens,
            eos_token_id=self._eos_ids,
            pad_token_id=self._pad_id,
            repetition_penalty=1.0,
            output_logits=True,
            return_dict_in_generate=True,
            stop_strings=stop or None,
            **sampling,
        )
        processors = LogitsProcessorList()
        if opts.presence_penalty or opts.frequency_penalty:
            processors.append(
                PenaltyProcessor(width, opts.presence_penalty, opts.frequency_penalty)
            )
        criteria = StoppingCriteriaList([Cancelled(cancel)] if cancel is not None else [])
        t0 = time.perf_counter()
        with torch.inference_mode(), torch.random.fork_rng(devices=[], enabled=seeded):
            if seeded:
                torch.manual_seed(int(opts.seed))  # type: ignore[arg-type]
            out = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                tokenizer=self.tokenizer if stop else None,
                logits_processor=processors,
                stopping_criteria=criteria,
                streamer=streamer,
            )
        latency = time.perf_counter() - t0
        gen = out.sequences[:, width:]
        k = min(max(int(opts.top_logprobs), 0), MAX_TOP_LOGPROBS) if opts.logprobs else 0
        chosen, alts, tops = step_logprobs(out.logits, gen, max(2, k))
        replies = []
        for b, prompt in enumerate(prompts):
            ids = gen[b].tolist()
            n, eos_hit = len(ids), False
            for i, t in enumerate(ids):
                if t in self._eos_ids:  # also catches the padding after an early finish
                    n, eos_hit = i, True
                    break
            ids = ids[:n]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            keep, stopped = n, False
            if stop:
                text, keep, stopped = cut_at_stop(text, self._starts(ids), stop)
            reply = ModelReply(
                text=text,
                model_id=self.model_id,
                logprobs=chosen[b][:keep],
                prompt_tokens=len(prompt),
                completion_tokens=keep,
                alt_logprobs=alts[b][:keep],
                latency_s=latency,
                finish_reason="stop" if (eos_hit or stopped) else "length",
                cached_tokens=self.prefix_cache.cached(prompt),
            )
            if opts.logprobs:
                piece = self._piece
                reply.token_texts = [piece(t) for t in ids[:keep]]
                reply.top_logprobs = [
                    top_n(((piece(i), lp) for i, lp in row), k) for row in tops[b][:keep]
                ]
            replies.append(apply_tool_calls(reply, options))
        return replies

    def _piece(self, token_id: int) -> str:
        """The text of one token (special tokens shown: they can be alternatives)."""
        return self.tokenizer.decode([int(token_id)], skip_special_tokens=False)

    def _starts(self, ids: list[int]) -> list[int]:
        """Character offset of each token in the decoded text (prefix decoding: merge-safe)."""
        decode = self.tokenizer.decode
        return [len(decode(ids[:i], skip_special_tokens=True)) for i in range(len(ids))]
