"""Jobs start quiet: third-party advice nobody running memroute acts on is off, and one switch
(MEMROUTE_THIRD_PARTY_LOGS=1, or hydra.verbose=true through jobs/cli.py) leaves it on."""

from __future__ import annotations

import logging
import warnings

from memroute.logs import QUIET, QUIET_ENV, quiet_third_party_logs


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
