"""Token-overlap agreement between two short answers (LoCoMo's normalization and F1).

Here, below the evaluation and the serving path, because both use it: the evaluation scores an
answer against its reference, the serving path's shadow judge compares two tiers' answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable
from functools import lru_cache

from memroute.errors import ConfigError

_PUNCT = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def normalize_answer(text: object) -> str:
    """LoCoMo's normalization: ``"The cat, and a Dog!"`` -> ``"cat dog"``."""
    s = str(text).replace(",", "").lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


@lru_cache(maxsize=1)
def _porter_stem() -> Callable[[str], str]:
    try:
        from nltk.stem import PorterStemmer
    except ImportError:
        raise ConfigError(
            "stem=True needs the nltk package (LoCoMo's Porter stemmer), which is not installed; "
            "install nltk or score with stem=False",
            field="stem",
        ) from None
    return PorterStemmer().stem


def answer_tokens(text: object, *, stem: bool = False) -> list[str]:
    tokens = normalize_answer(text).split()
    if stem:
        stemmer = _porter_stem()
        tokens = [stemmer(t) for t in tokens]
    return tokens


def f1_score(prediction: object, reference: object, *, stem: bool = False) -> float:
    """Plain token-overlap F1 (LoCoMo ``f1_score``); 0.0 when nothing overlaps."""
    pred = answer_tokens(prediction, stem=stem)
    ref = answer_tokens(reference, stem=stem)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision = same / len(pred)
    recall = same / len(ref)
    return 2 * precision * recall / (precision + recall)
