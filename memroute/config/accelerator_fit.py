"""Do the cascade's vLLM engines fit the accelerator? Arithmetic only: no torch, no vLLM.

For each tier hosted on the accelerator (``deploy.N.num_gpus > 0``, engine ``vllm``) with its
architecture facts set (``num_layers``, ``num_kv_heads``, ``head_dim``, ``weight_bits``):

    need   = weights + KV cache of one ``max_model_len`` sequence + ENGINE_RESERVE_GB
    budget = engine_args.gpu_memory_utilization x accelerator.memory_gb (x tensor/pipeline size)

vLLM's ``gpu_memory_utilization`` is the share of the whole device one engine may use; an engine
whose budget cannot hold one full sequence after its weights refuses to start, so the check
refuses it first, with the numbers. Co-hosted engines' shares must add up to at most
MAX_COHOSTED_UTILIZATION. GB here are 1e9 bytes; vendors' "141 GB" / "80 GB" are closer to GiB
(an H200 shows ~140 GiB), so budgets come out ~7% low: the check errs on refusing.

``python bench/fit_table.py`` prints the table of docs/SCALING_FIT.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from memroute.errors import ConfigError

if TYPE_CHECKING:
    from memroute.config.schema import ModelConfig


class _Deploy(Protocol):
    num_gpus: float
    autoscaling: Any


class ServedTier(Protocol):
    """A cascade slot as hosted (``memroute.config.serve.ServedTier``)."""

    index: int
    model: ModelConfig
    deploy: _Deploy


@dataclass
class AcceleratorConfig:
    """The device the GPU tiers share (``serve.accelerator``; the GPU presets set it)."""

    name: str = ""  # e.g. MI300X, H200: for messages and the fit table
    memory_gb: float = 0.0  # per device; 0: unknown, nothing is checked
    count: int = 1  # devices on the node: the tiers' replicas' num_gpus must fit

GB = 1e9
# Activations of the profiling forward pass (max_num_batched_tokens), CUDA graphs, the CUDA
# context and NCCL/cuBLAS workspaces: memory inside an engine's share that is neither weights
# nor KV cache. An estimate (vLLM logs it at start-up as non-torch and activation peak memory,
# typically 1-2 GB for models of this size), not measured for these presets.
ENGINE_RESERVE_GB = 2.0
# Co-hosted engines' shares: what is left is for the other processes on the device (the embedder,
# Ray workers' CUDA contexts) and for fragmentation. vLLM refuses to start when its share exceeds
# the memory still free, so more than 1.0 never works and close to it fails intermittently.
MAX_COHOSTED_UTILIZATION = 0.95
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's own default when engine_args leaves it out
# AWQ/GPTQ int4 store per group of 128 weights an fp16 scale and a packed zero point: about
# 4 bytes per 128 weights (0.031 B/weight on top of 0.5). Counting the whole model this way also
# covers the embeddings/lm_head these checkpoints keep in fp16: 235B x (0.5 + 4/128) = 124.8 GB
# against 124 GB on disk for Qwen3-235B-A22B-Instruct-2507-AWQ.
QUANT_GROUP_SIZE = 128
QUANT_GROUP_BYTES = 4.0
KV_BYTES = 2  # bf16 KV cache (vLLM's kv_cache_dtype "auto" for bf16 and AWQ models)


@dataclass(frozen=True)
class TierFit:
    """The memory arithmetic of one tier's engine (GB = 1e9 bytes)."""

    index: int
    model: str
    max_model_len: int
    utilization: float
    weights_gb: float
    kv_bytes_per_token: int
    kv_gb_per_sequence: float  # one max_model_len sequence
    reserve_gb: float
    budget_gb: float
    shared: bool = False  # on a fractional GPU: co-hosted with the other fractional tiers

    @property
    def need_gb(self) -> float:
        return self.weights_gb + self.kv_gb_per_sequence + self.reserve_gb

    @property
    def kv_tokens(self) -> int:
        """KV-cache tokens the budget holds after weights and reserve (0 when it holds none)."""
        free = (self.budget_gb - self.weights_gb - self.reserve_gb) * GB
        return max(0, int(free // self.kv_bytes_per_token))

    @property
    def sequences(self) -> int:
        """Full max_model_len sequences that fit at once (vLLM needs at least one)."""
        return self.kv_tokens // self.max_model_len

    @property
    def fits(self) -> bool:
        return self.sequences >= 1


def weights_bytes(model: ModelConfig) -> float:
    """Weight bytes: parameters x bits / 8, plus int4's group scales and zeros."""
    params = (model.weight_params_b or model.params_b) * 1e9
    bits = model.weight_bits or 16
    extra = QUANT_GROUP_BYTES / QUANT_GROUP_SIZE if bits < 8 else 0.0
    return params * (bits / 8 + extra)


def kv_bytes_per_token(model: ModelConfig) -> int:
    """K and V of every layer's KV heads, bf16."""
    return 2 * int(model.num_layers) * int(model.num_kv_heads) * int(model.head_dim) * KV_BYTES


def has_facts(model: ModelConfig) -> bool:
    """The fit check needs all four architecture facts; without them the model is not checked."""
    facts = (model.num_layers, model.num_kv_heads, model.head_dim, model.weight_bits)
    return all(f is not None for f in facts)


def on_accelerator(tier: ServedTier) -> bool:
    """A vLLM engine Ray places on the accelerator (other engines do not read the fraction)."""
    return tier.deploy.num_gpus > 0 and tier.model.engine == "vllm"


def utilization(model: ModelConfig) -> float:
    return float(model.engine_args.get("gpu_memory_utilization", VLLM_DEFAULT_UTILIZATION))


def _devices(model: ModelConfig) -> int:
    """Devices one engine spans: its weights and KV cache are split over them."""
    args = model.engine_args
    return max(1, int(args.get("tensor_parallel_size", 1)) * int(args.get("pipeline_parallel_size", 1)))


def tier_fit(tier: ServedTier, memory_gb: float) -> TierFit:
    m = tier.model
    per_token = kv_bytes_per_token(m)
    return TierFit(
        index=tier.index,
        model=m.name,
        max_model_len=m.max_model_len,
        utilization=utilization(m),
        weights_gb=weights_bytes(m) / GB,
        kv_bytes_per_token=per_token,
        kv_gb_per_sequence=per_token * m.max_model_len / GB,
        reserve_gb=ENGINE_RESERVE_GB,
        budget_gb=utilization(m) * memory_gb * _devices(m),
        shared=tier.deploy.num_gpus < 1,
    )


def fit_report(accelerator: AcceleratorConfig, tiers: Sequence[ServedTier]) -> list[TierFit]:
    """The arithmetic of every checked tier (hosted on the accelerator, with its facts);
    empty when the accelerator's memory is unknown (memory_gb 0)."""
    if accelerator.memory_gb <= 0:
        return []
    return [tier_fit(t, accelerator.memory_gb) for t in tiers if on_accelerator(t) and has_facts(t.model)]


def check_accelerator_fit(accelerator: AcceleratorConfig, tiers: Sequence[ServedTier]) -> None:
    """Refuse tiers that cannot start on the accelerator, naming the field; nothing is checked
    when ``accelerator.memory_gb`` is 0 (unknown)."""
    if accelerator.memory_gb < 0:
        raise ConfigError(f"accelerator.memory_gb must be >= 0, got {accelerator.memory_gb}",
                          field="accelerator.memory_gb")
    if accelerator.memory_gb == 0:
        return
    if accelerator.count < 1:
        raise ConfigError(f"accelerator.count must be >= 1, got {accelerator.count}", field="accelerator.count")
    hosted = [t for t in tiers if on_accelerator(t)]
    for t in hosted:
        _check_facts(t)
    _check_gpu_count(accelerator, tiers)
    _check_cohosted(hosted)
    _check_tiers(fit_report(accelerator, tiers), accelerator)


def _check_facts(tier: ServedTier) -> None:
    m, where = tier.model, f"cascade.{tier.index}"
    u = utilization(m)
    if not 0 < u <= 1:
        raise ConfigError(f"{where}.engine_args.gpu_memory_utilization must be in (0, 1], got {u}",
                          field=f"{where}.engine_args.gpu_memory_utilization")
    for name in ("num_layers", "num_kv_heads", "head_dim", "weight_bits"):
        value = getattr(m, name)
        if value is not None and value <= 0:
            raise ConfigError(f"{where}.{name} must be > 0, got {value}", field=f"{where}.{name}")


def _check_gpu_count(accelerator: AcceleratorConfig, tiers: Sequence[ServedTier]) -> None:
    """Ray cannot place more GPUs than the node has: every replica holds its num_gpus."""
    wanted = sum(t.deploy.num_gpus * t.deploy.autoscaling.max_replicas for t in tiers)
    if wanted > accelerator.count + 1e-9:
        parts = " + ".join(f"{t.deploy.num_gpus:g} x {t.deploy.autoscaling.max_replicas}" for t in tiers
                           if t.deploy.num_gpus > 0)
        raise ConfigError(
            f"the tiers' replicas want {parts} = {wanted:g} GPUs, but accelerator.count is {accelerator.count}",
            field="accelerator.count",
        )


def _check_cohosted(hosted: Sequence[ServedTier]) -> None:
    """Engines on fractional GPUs share a device (Ray packs fractions onto one GPU first): their
    memory shares, one per replica, must leave headroom on it."""
    shared = [t for t in hosted if t.deploy.num_gpus < 1]
    if sum(t.deploy.autoscaling.max_replicas for t in shared) < 2:
        return  # one engine alone on its device
    total = sum(utilization(t.model) * t.deploy.autoscaling.max_replicas for t in shared)
    if total > MAX_COHOSTED_UTILIZATION + 1e-9:
        parts = " + ".join(f"{utilization(t.model):g}" for t in shared)
        last = shared[-1].index
        raise ConfigError(
            f"co-hosted engines' gpu_memory_utilization add up to {parts} = {total:.2f}, more than "
            f"{MAX_COHOSTED_UTILIZATION} of the device (vLLM refuses a share larger than the free memory)",
            field=f"cascade.{last}.engine_args.gpu_memory_utilization",
        )


def _check_tiers(fits: Sequence[TierFit], accelerator: AcceleratorConfig) -> None:
    """One error for every tier that does not fit. It names accelerator.memory_gb when no choice
    of shares could help (a tier, or the co-hosted tiers together, need more than
    MAX_COHOSTED_UTILIZATION of the device), else the first failing tier's share."""
    failing = [f for f in fits if not f.fits]
    if not failing:
        return
    limit = MAX_COHOSTED_UTILIZATION * accelerator.memory_gb
    too_big = any(f.need_gb > limit * f.budget_gb / (f.utilization * accelerator.memory_gb) for f in failing)
    too_big = too_big or sum(f.need_gb for f in fits if f.shared) > limit
    field = ("accelerator.memory_gb" if too_big
             else f"cascade.{failing[0].index}.engine_args.gpu_memory_utilization")
    device = f"{accelerator.memory_gb:g} GB" + (f" {accelerator.name}" if accelerator.name else "")
    raise ConfigError("; ".join(
        f"cascade.{f.index} ({f.model}) needs {f.weights_gb:.1f} GB weights + "
        f"{f.kv_gb_per_sequence:.1f} GB KV for {f.max_model_len} tokens + {f.reserve_gb:.1f} GB reserve "
        f"= {f.need_gb:.1f} GB, but gpu_memory_utilization {f.utilization:g} of {device} is "
        f"{f.budget_gb:.1f} GB" for f in failing), field=field)
