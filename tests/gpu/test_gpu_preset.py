"""The GPU preset's tiers end to end on a real GPU, with small models standing in for the
production pair (skipped without a CUDA / ROCm device or a GPU build of vLLM).

    MEMROUTE_GPU_PRESET=gpu-h200 python -m pytest tests/gpu        # or gpu, gpu-a100-80g

The preset's routing, memory and engine settings are kept; only each tier's model is swapped
for the Qwen2.5 0.5B / 1.5B assets (the same folders the CPU tests use), at the preset's memory
fractions scaled down so both fit beside anything else on the device. Checked: both engines load
on the GPU, the probe answers with memory injected and a confidence from its log-probs, a
below-tau answer escalates, and every call's tokens are counted.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # torch.cuda covers ROCm builds too
    pytest.skip("no GPU", allow_module_level=True)
vllm = pytest.importorskip("vllm")
if getattr(vllm, "__version__", "").endswith("+cpu"):
    pytest.skip("vLLM is the CPU build", allow_module_level=True)

from memroute import build  # noqa: E402
from memroute.config.compose import compose_serve_config  # noqa: E402
from memroute.config.schema import ordered_cascade  # noqa: E402
from memroute.types import TurnPair  # noqa: E402

PRESET = os.environ.get("MEMROUTE_GPU_PRESET", "gpu-h200")
SMALL = ("qwen2.5-0.5b", "qwen2.5-1.5b")
T0 = 1683504000


@pytest.fixture(scope="module")
def parts(tmp_path_factory, assets):
    cfg = compose_serve_config(PRESET, [])
    models = ordered_cascade(cfg.cascade)
    small = []
    for model, asset in zip(models, SMALL):
        args = dict(model.engine_args)
        args["gpu_memory_utilization"] = 0.2  # the small stand-ins, beside each other
        args.pop("quantization", None)  # the production pair's AWQ does not apply to them
        small.append(replace(model, name=asset, asset=asset, path=None, engine="vllm",
                             max_model_len=4096, engine_args=args))
    tiers = build.tiers(small, assets)
    enc = build.encoder(cfg.embedder, assets)
    store = build.store(replace(cfg.memory, uri=str(tmp_path_factory.mktemp("gpu") / "m.db"),
                                index_type="FLAT"), enc.dim)
    retriever = build.retriever(enc, store, cfg.retrieval)
    router = build.router(tiers, cfg.router, cfg.retrieval, retriever)
    yield router, retriever
    for t in tiers:
        t.backend.close()
    store.close()


def test_the_probe_answers_from_memory_on_the_gpu(parts):
    router, retriever = parts
    retriever.remember([TurnPair("gpu:alice", "s1", 0, "My locker code is QX-4471.",
                                 "Noted, your locker code is QX-4471.", T0)])
    result = router.route("gpu:alice", "What is my locker code?")
    assert "4471" in result.answer
    first = result.calls[0]
    assert first.base_prompt_tokens > 0 and first.output_tokens > 0 and first.injected_tokens > 0
    assert 0.0 <= result.decision.confidences[0] <= 1.0


def test_a_low_confidence_answer_escalates(parts):
    router, _ = parts
    strict = replace(router.cfg, tau=1.01)  # nothing is confident enough: always the next tier
    router.cfg = strict
    result = router.route("gpu:bob", "What is 17 times 23?")
    assert len(result.calls) == 2 and result.decision.answered_tier == 1
    assert result.decision.escalated
