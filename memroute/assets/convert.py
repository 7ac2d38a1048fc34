"""GGUF -> bf16 safetensors folder, for back ends that cannot read GGUF (vLLM on CPU).

The folder is built under a temporary name and swapped in only when complete; a marker file
(:data:`CONVERTED_MARKER`) records the sha256 of the GGUF it was built from, so a changed pin
triggers a rebuild. torch / transformers / gguf are imported only when converting.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from pathlib import Path
from typing import Callable

from memroute.errors import AssetError
from memroute.logs import quiet_transformers
from memroute.assets.files import fsync_tree, swap_in_dir
from memroute.assets.specs import AssetSpec

CONVERTED_MARKER = "memroute_asset.json"

# (spec, gguf file, output folder) -> None; writes config.json + *.safetensors + tokenizer
Converter = Callable[[AssetSpec, Path, Path], None]


def converted_ok(folder: Path, source_sha256: str) -> bool:
    """Built from the GGUF with this sha256 (marker) and still holding its config and weights."""
    try:
        marker = json.loads((folder / CONVERTED_MARKER).read_text())
    except (OSError, ValueError):
        return False
    return (
        marker.get("source_sha256") == source_sha256
        and (folder / "config.json").is_file()
        and any(folder.glob("*.safetensors"))
    )


def build_converted(
    spec: AssetSpec,
    gguf: Path,
    out: Path,
    convert: Converter,
    progress: Callable[[str], None],
) -> None:
    """Run ``convert`` into a temporary folder, add the marker and swap it in as ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{spec.name}.tmp-{secrets.token_hex(4)}")
    progress(f"{spec.name}: converting GGUF to a bf16 safetensors folder")
    t0 = time.perf_counter()
    try:
        try:
            convert(spec, gguf, tmp)
        except (AssetError, KeyboardInterrupt):
            raise
        except Exception as exc:  # a transformers failure deep inside: name the asset
            raise AssetError(
                f"Asset '{spec.name}': converting {gguf.name} to safetensors failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        marker = {
            "asset": spec.name,
            "source": gguf.name,
            "source_sha256": spec.sha256,
            "dtype": "bfloat16",
            "transformers": _transformers_version(),
        }
        (tmp / CONVERTED_MARKER).write_text(json.dumps(marker, indent=1))
        fsync_tree(tmp)
        swap_in_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"{spec.name}: converted in {time.perf_counter() - t0:.1f} s -> {out}")


def convert_gguf(spec: AssetSpec, gguf: Path, out: Path) -> None:
    """Dequantize the GGUF with transformers and save it as bf16 safetensors + tokenizer.

    vLLM on CPU cannot read GGUF. Clearing the quantizer and ``quantization_config`` makes
    the saved folder a plain bf16 checkpoint rather than one that claims to be GGUF.
    """
    from transformers import AutoTokenizer

    # transformers' warnings and bars off: build_converted prints memroute's progress lines.
    with quiet_transformers():
        _convert_gguf(gguf, out)
        template = AutoTokenizer.from_pretrained(out).chat_template
    if not template:
        raise AssetError(
            f"Asset '{spec.name}': the converted tokenizer lost its chat template"
        )


def _convert_gguf(gguf: Path, out: Path) -> None:
    import gc

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    # dequantize=True: every weight unpacked into a dense bf16 tensor, the checkpoint vLLM reads.
    # Without it transformers keeps the blocks packed where it has a kernel for them (and warns,
    # where it has none, that float32 would load packed weights faster: not what is built here).
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16,
        quantization_config=GgufConfig(dequantize=True),
    )
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    del model
    gc.collect()

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if not tok.chat_template:
        tok.chat_template = _gguf_chat_template(gguf)
    tok.save_pretrained(out)


def _transformers_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("transformers")
    except PackageNotFoundError:
        return None


def _gguf_chat_template(gguf: Path) -> str | None:
    """The ``tokenizer.chat_template`` metadata string of a GGUF file, if it has one."""
    from gguf import GGUFReader

    field = GGUFReader(gguf).fields.get("tokenizer.chat_template")
    return str(field.contents()) if field is not None else None
