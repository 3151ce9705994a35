"""HELMET's answer normalisation (utils.normalize_answer), shared by the per-sample metrics
(`metrics`) and ALCE's (`alce`), and the type of a sample's metrics. No torch."""

from __future__ import annotations

import re
import string

Metrics = dict[str, float]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
    """utils.normalize_answer: lower case, ASCII punctuation removed, then the articles
    a/an/the (as whole words), then runs of whitespace made one space."""
    s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", s).split())
