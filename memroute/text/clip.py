"""Fitting text into byte limits (Milvus VARCHARs count UTF-8 bytes) without splitting a character."""

from __future__ import annotations

ELLIPSIS = " […] "


def clip_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` within ``max_bytes`` of UTF-8."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    return raw[:max_bytes].decode("utf-8", errors="ignore")


def shorten_middle(text: str, max_bytes: int) -> str:
    """``text`` within ``max_bytes``: its start and end kept, the middle replaced by ``[…]``
    (a long message usually says what it is about at the start and asks at the end)."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text
    keep = max(0, max_bytes - len(ELLIPSIS.encode("utf-8")))
    head = raw[: keep // 2].decode("utf-8", errors="ignore")
    tail = raw[len(raw) - (keep - keep // 2):].decode("utf-8", errors="ignore")
    return f"{head}{ELLIPSIS}{tail}"
