"""Tokenising and BM25 scoring shared by the recall stores.

Tokens are lowercased runs of letters and digits (Unicode-aware, never
containing ``_``, which lets the Redis index keep bookkeeping fields beside
token fields), minus a small English stopword list, with a plural ``s``
dropped. Scores are Okapi BM25 with the usual ``k1 = 1.2`` and ``b = 0.75``;
higher is more relevant.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping

K1 = 1.2
B = 0.75

_TOKEN_RE = re.compile(r"[^\W_]+")

STOPWORDS = frozenset(
    """
    a an and are as at be but by do does did for from had has have he her his i if in into
    is it its me my no not of on or our she so than that the their them then there these
    they this to too was we were what when where which who whom why will with you your
    """.split()
)


def _normalise(token: str) -> str:
    # A deliberately tiny stemmer: plural "s" only, so "cats" finds "cat"
    # without the surprises of a full stemmer.
    if len(token) > 3 and token.endswith("s") and not token.endswith(("ss", "us", "is")):
        return token[:-1]
    return token


def tokenize(text: str) -> list[str]:
    """The scoring tokens of ``text``, in order (duplicates kept)."""
    return [_normalise(t) for t in _TOKEN_RE.findall(text.lower()) if t not in STOPWORDS]


def term_frequencies(text: str) -> tuple[dict[str, int], int]:
    """``({token: count}, document length)`` of ``text``."""
    tokens = tokenize(text)
    return dict(Counter(tokens)), len(tokens)


def idf(doc_count: int, doc_freq: int) -> float:
    """Inverse document frequency; the ``1 +`` keeps it positive for very common tokens."""
    return math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


def score_documents(
    query_tokens: Iterable[str],
    postings: Mapping[str, Mapping[str, int]],
    doc_lengths: Mapping[str, int],
    doc_count: int,
    avg_length: float,
) -> dict[str, float]:
    """BM25 score of every document that holds at least one query token.

    ``postings``: token -> {doc id: term frequency}; ``doc_lengths``: doc id ->
    length in tokens; ``doc_count``/``avg_length``: collection statistics.
    A query token repeated in the query counts once.
    """
    scores: dict[str, float] = {}
    avg = avg_length if avg_length > 0 else 1.0
    for token in dict.fromkeys(query_tokens):
        docs = postings.get(token)
        if not docs:
            continue
        weight = idf(doc_count, len(docs))
        for doc_id, tf in docs.items():
            length = doc_lengths.get(doc_id, avg)
            norm = tf + K1 * (1.0 - B + B * length / avg)
            scores[doc_id] = scores.get(doc_id, 0.0) + weight * tf * (K1 + 1.0) / norm
    return scores
