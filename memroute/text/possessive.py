"""What a text names as the user's own: the "my X" / "our X" of a question or a statement.

One reader for both users of it: supersession (an older statement about another thing the user
has is not replaced: "my old car" is not "my new bike") and the grounding gate (a source naming
the question's "my cousin" outranks one that only shares "live").
"""

from __future__ import annotations

import re
from collections.abc import Collection

from memroute.text.tokenize import unigrams

# "my"/"our" and the two words after it: the thing is the first that is not a generic word
# ("my old roommate" -> roommate, "my sister's birthday" -> sister).
_POSSESSIVE = re.compile(r"\b(?:my|our)\s+([a-z][\w'-]*)(?:\s+([a-z][\w'-]*))?", re.I)


def possessed(text: str, skip: Collection[str] = frozenset()) -> frozenset[str]:
    """Stems of the things ``text`` names as the user's: for each "my"/"our", the first of the
    next two words whose stem is not in ``skip`` (stemmed generic words)."""
    out = set()
    for m in _POSSESSIVE.finditer(text):
        for word in m.groups():
            stems = unigrams(word or "", stem=True)
            if stems and stems[0] not in skip:
                out.add(stems[0])
                break
    return frozenset(out)
