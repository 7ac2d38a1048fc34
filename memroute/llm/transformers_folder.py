"""The model folder the transformers back end loads: a converted safetensors folder, checked
before any loading starts (a GGUF file or a folder without ``config.json`` is refused with an
:class:`~memroute.errors.AssetError` that says what to pass instead).
"""

from __future__ import annotations

from pathlib import Path

from memroute.errors import AssetError


def check_folder(path: str | Path) -> Path:
    folder = Path(path).expanduser()
    if folder.suffix == ".gguf" or folder.is_file():
        raise AssetError(
            f"model path {str(folder)!r} is a file; pass a converted model folder "
            "(AssetStore().hf_folder(name) creates one from the GGUF)"
        )
    if not (folder / "config.json").is_file():
        raise AssetError(f"model folder {str(folder)!r} has no config.json")
    return folder
