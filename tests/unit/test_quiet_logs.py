"""Jobs start quiet: third-party advice nobody running memroute acts on is off, and one switch
(MEMROUTE_THIRD_PARTY_LOGS=1, or hydra.verbose=true through jobs/cli.py) leaves it on. An asset
conversion prints memroute's progress lines, none of transformers' warnings or bars."""

from __future__ import annotations

import logging
import warnings

import pytest

from memroute.logs import QUIET, QUIET_ENV, quiet_third_party_logs, quiet_transformers


def _levels():
    return {name: logging.getLogger(name).level for name in [*QUIET, "vllm"]}


def test_quiet_sets_levels_env_and_drops_vllms_kernel_warnings(monkeypatch):
    saved = _levels()
    for name in QUIET_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MEMROUTE_THIRD_PARTY_LOGS", raising=False)
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "ERROR")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            quiet_third_party_logs()
            warnings.warn_explicit("reduce_op is deprecated", FutureWarning, "dispatcher.py", 1,
                                   module="vllm.triton_utils.dispatcher")
            warnings.warn_explicit("ours", FutureWarning, "x.py", 1, module="memroute.x")
        assert [str(w.message) for w in seen] == ["ours"]
        assert logging.getLogger("sentence_transformers").level == logging.WARNING
        assert logging.getLogger("vllm").level == logging.ERROR
        import os

        assert all(os.environ[k] == v for k, v in QUIET_ENV.items())
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def test_the_switch_leaves_everything_on(monkeypatch):
    saved = _levels()
    monkeypatch.setenv("MEMROUTE_THIRD_PARTY_LOGS", "1")
    quiet_third_party_logs()
    assert _levels() == saved


# -- an asset conversion: memroute's progress lines, none of transformers' --------------------


@pytest.fixture
def loud_transformers(monkeypatch):
    """transformers as a fresh process has it: warnings and progress bars on."""
    from transformers.utils import logging as hf_logging

    monkeypatch.delenv("MEMROUTE_THIRD_PARTY_LOGS", raising=False)
    monkeypatch.delenv("HF_HUB_DISABLE_PROGRESS_BARS", raising=False)
    saved = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_warning()
    with warnings.catch_warnings():  # huggingface_hub's own bars may be off (its env var): fine
        warnings.simplefilter("ignore", UserWarning)
        hf_logging.enable_progress_bar()
    yield hf_logging
    hf_logging.set_verbosity(saved[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        (hf_logging.enable_progress_bar if saved[1] else hf_logging.disable_progress_bar)()


def _chatter(hf_logging) -> str:
    """A GGUF load's three kinds of output: a transformers warning, the legacy GGUF loader's
    own tqdm bar, and transformers' (weights loading) bar. Returns what was logged: the
    library's handler holds the stderr of when it was made, not the test's."""
    import io

    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    logged = io.StringIO()
    handler = logging.StreamHandler(logged)
    root = logging.getLogger("transformers")
    root.addHandler(handler)
    try:
        hf_logging.get_logger("transformers.quantizers.quantizer_gguf").warning(
            "Loading a GGUF checkpoint with its weights packed is fastest in float32")
    finally:
        root.removeHandler(handler)
    for _ in gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors..."):
        pass
    for _ in hf_logging.tqdm(range(3), desc="Loading weights"):
        pass
    return logged.getvalue()


def test_quiet_transformers_silences_the_calls_inside_and_restores_after(loud_transformers, capfd):
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    hf_logging = loud_transformers
    before = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), gguf_utils.tqdm
    capfd.readouterr()
    with quiet_transformers():
        logged = _chatter(hf_logging)
    assert (logged, capfd.readouterr().err) == ("", "")
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), gguf_utils.tqdm) == before
    logged = _chatter(hf_logging)  # outside it, as loud as before: only the call inside was quiet
    err = capfd.readouterr().err
    assert "fastest in float32" in logged
    assert "Converting and de-quantizing" in err and "Loading weights" in err
    with pytest.raises(RuntimeError), quiet_transformers():
        raise RuntimeError("a failed conversion restores them too")
    assert (hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), gguf_utils.tqdm) == before


def test_the_switch_leaves_transformers_loud(loud_transformers, capfd, monkeypatch):
    monkeypatch.setenv("MEMROUTE_THIRD_PARTY_LOGS", "1")
    capfd.readouterr()
    with quiet_transformers():
        _chatter(loud_transformers)
    assert "Converting and de-quantizing" in capfd.readouterr().err


def test_conversion_loads_a_dense_model_quietly(monkeypatch, tmp_path):
    """convert_gguf asks transformers for every weight unpacked (a dense bf16 checkpoint, not
    packed GGUF blocks where a kernel exists), inside quiet_transformers."""
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    from memroute.assets import convert
    from memroute.assets.store import get_spec

    seen = {}

    def from_pretrained(*args, **kwargs):
        seen.update(kwargs, verbosity=hf_logging.get_verbosity())
        raise RuntimeError("stop here")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", from_pretrained)
    with pytest.raises(RuntimeError, match="stop here"):
        convert.convert_gguf(get_spec("smollm2-135m"), tmp_path / "m.gguf", tmp_path / "out")
    assert seen["dtype"] == torch.bfloat16 and seen["quantization_config"].dequantize is True
    assert seen["verbosity"] == hf_logging.ERROR
