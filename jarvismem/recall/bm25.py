"""Tokenising and BM25 scoring shared by the lexical recall stores.

Text becomes lowercased runs of letters and digits (never ``_``, so the Redis index can
keep bookkeeping fields beside token fields), with dates and numbers normalised,
:data:`STOPWORDS` dropped and words stemmed (Snowball via PyStemmer, a C extension:
this runs on every write and every query). An entry's document adds its indexed
metadata values and the day it happened. Scores are Okapi BM25 (:data:`K1`, :data:`B`);
:data:`INDEX_VERSION` names this tokeniser so a store never mixes indexes of two
versions. The rules in full: docs/recall.md, "Ranking rule".
"""

from __future__ import annotations

import heapq
import math
import re
import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime

import Stemmer

K1 = 0.9
B = 0.4
# Measured on the LoCoMo dev set (7 long conversations, 1,032 questions; the
# tokeniser of this module): k1 = 0.9, b = 0.4 gave R@10 0.649 against 0.632 for the
# textbook 1.2/0.75, and was at least as good on each of the 7 conversations. The
# region k1 0.6-1.2, b 0.2-0.4 is flat (0.645-0.650). Short chat-like entries do
# not need the strong length normalisation of b = 0.75.

INDEX_VERSION = "2"
"""The tokeniser's version; change it whenever :func:`tokenize` or :func:`date_tokens`
would give different tokens for the same text, so stored indexes are rebuilt."""

MONTHS = (
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
)

STOPWORDS = frozenset(
    """
    a also am an and are as at be been being but by can could d did do does doing done
    either for from had has have having he her hers herself him himself his how i if in into
    is it its itself just ll m may me might mine must my myself no nor not of on or our ours
    ourselves re s shall she should so t than that the their theirs them themselves then
    there these they this those to too us ve very was we were what when where which who whom
    whose why will with would you your yours yourself yourselves
    """.split()
)
"""Function words that tell entries apart by form, not subject: articles, pronouns,
auxiliaries and modals, conjunctions, the commonest prepositions, contraction
pieces ("I'm" gives ``i``, ``m``) and question words ("when", "what", "how"), so a
question's subject, not its form, decides what is recalled. Prepositions and
quantifiers that carry meaning ("after", "before", "up", "more") are kept. "May"
is here as the modal verb; the month is recognised inside dates."""

_MONTH_NUMBER = {name: i for i, name in enumerate(MONTHS, start=1)}
_MONTH_NUMBER.update({name[:3]: i for i, name in enumerate(MONTHS, start=1)})
_MONTH_NUMBER["sept"] = 9

_MONTH = r"(?P<{0}>" + "|".join(sorted(_MONTH_NUMBER, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{0}>\d{{1,2}})(?:st|nd|rd|th)?"
_YEAR = r"(?P<{0}>1[6-9]\d\d|2[0-2]\d\d)"
# One scanner for dates and words: at each position a date is tried first, so its
# month and day never reach the word path (where "may" would be a stopword).
_SCANNER = re.compile(
    r"\b(?:"
    + r"|".join(
        (
            # 2023-05-08, also followed by a time ("T13:56"; left to the word path)
            _YEAR.format("iy") + r"-(?P<im>\d{1,2})-(?P<id>\d{1,2})(?=T\d|\b)",
            # May 8, 2023 / May 8th 2023 / May 8
            _MONTH.format("am")
            + r"\s+"
            + _DAY.format("ad")
            + r"(?:,?\s+"
            + _YEAR.format("ay")
            + r")?\b",
            # 8 May 2023 / 8th of May, 2023 / 8 May
            _DAY.format("bd")
            + r"\s+(?:of\s+)?"
            + _MONTH.format("bm")
            + r"(?:,?\s+"
            + _YEAR.format("by")
            + r")?\b",
            # May 2023 / May, 2023
            _MONTH.format("cm") + r",?\s+" + _YEAR.format("cy") + r"\b",
        )
    )
    + r")"
    + r"|(?P<word>[^\W_]+)",
    re.IGNORECASE,
)
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ORDINAL = re.compile(r"^(\d+)(?:st|nd|rd|th)$")

_local = threading.local()


def _stemmer() -> Stemmer.Stemmer:
    # A PyStemmer object is not thread-safe: one per thread (it caches stems itself).
    stemmer: Stemmer.Stemmer | None = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def _word(token: str) -> str | None:
    """The scoring form of one lowercased word, or ``None`` for a stopword."""
    if token in STOPWORDS:
        return None
    if token.isdigit():
        return token.lstrip("0") or "0"
    ordinal = _ORDINAL.match(token)
    if ordinal:
        return ordinal.group(1).lstrip("0") or "0"
    stem: str = _stemmer().stemWord(token)
    return stem


def _month_token(month: int) -> str:
    # The stem of the month's full name, so a bare "June" (word path) and a
    # recognised date in June give the same token.
    name = MONTHS[month - 1]
    stem: str = _stemmer().stemWord(name)
    return stem


def _date(year: str | None, month: int, day: str | None) -> list[str] | None:
    """The tokens of a recognised date, or ``None`` when it is not a real date."""
    if not 1 <= month <= 12:
        return None
    tokens = [] if year is None else [year]
    month_token = _month_token(month)
    tokens.append(month_token)
    if day is not None:
        number = int(day)
        if not 1 <= number <= 31:
            return None
        tokens.append(f"{month_token}{number}")
    return tokens


def _match_date(match: re.Match[str]) -> list[str] | None:
    group = match.group
    if group("iy"):
        return _date(group("iy"), int(group("im")), group("id"))
    if group("am"):
        return _date(group("ay"), _MONTH_NUMBER[group("am").lower()], group("ad"))
    if group("bm"):
        return _date(group("by"), _MONTH_NUMBER[group("bm").lower()], group("bd"))
    return _date(group("cy"), _MONTH_NUMBER[group("cm").lower()], None)


def _words(text: str) -> list[str]:
    """Word-path tokens only: what a span that looked like a date but was not gives."""
    out = []
    for raw in re.findall(r"[^\W_]+", text.lower()):
        token = _word(raw)
        if token is not None:
            out.append(token)
    return out


def tokenize(text: str) -> list[str]:
    """The scoring tokens of ``text``, in order (duplicates kept)."""
    out: list[str] = []
    for match in _SCANNER.finditer(_THOUSANDS.sub("", text)):
        word = match.group("word")
        if word is not None:
            token = _word(word.lower())
            if token is not None:
                out.append(token)
            continue
        dated = _match_date(match)
        out.extend(dated if dated is not None else _words(match.group(0)))
    return out


def date_tokens(epoch_ms: int) -> list[str]:
    """The tokens of the (UTC) day of ``epoch_ms``: year, month, month-and-day."""
    day = datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
    tokens = _date(str(day.year), day.month, str(day.day))
    assert tokens is not None  # a real calendar day
    return tokens


def document_tokens(
    content: str,
    *,
    occurred_at: int | None = None,
    metadata: Mapping[str, str] | None = None,
    indexed_metadata: Collection[str] = (),
) -> list[str]:
    """Every scoring token of an entry: its content, the values of the metadata keys
    in ``indexed_metadata`` (sorted by key) and the day of ``occurred_at``."""
    tokens = tokenize(content)
    if metadata and indexed_metadata:
        for key in sorted(indexed_metadata):
            value = metadata.get(key)
            if value:
                tokens.extend(tokenize(value))
    if occurred_at is not None:
        tokens.extend(date_tokens(occurred_at))
    return tokens


def term_frequencies(
    text: str | Iterable[str],
) -> tuple[dict[str, int], int]:
    """``({token: count}, document length)`` of ``text`` (or of ready-made tokens)."""
    tokens = tokenize(text) if isinstance(text, str) else list(text)
    return dict(Counter(tokens)), len(tokens)


def idf(doc_count: int, doc_freq: int) -> float:
    """Inverse document frequency; the ``1 +`` keeps it positive for very common tokens."""
    return math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5))


TF_CAP = 2**24 - 1
"""Term frequencies are counted up to this (a term's weight is flat long before)."""
_DL_UNIT = 2**24


def pack(tf: int, length: int) -> int:
    """A posting's value: term frequency and document length in one integer.

    One number per posting keeps an index small and quick to read (the Redis
    store parses postings on every recall); :func:`score_documents` unpacks it.
    """
    return min(tf, TF_CAP) + length * _DL_UNIT


def score_documents(
    query_tokens: Iterable[str],
    postings: Mapping[str, Mapping[str, int | str]],
    doc_count: int,
    avg_length: float,
    top: int | None = None,
    tf_max: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """BM25 scores of the documents that hold at least one query token.

    ``postings``: token -> {doc id: :func:`pack` (tf, doc length)}, the packed
    value as an int or its decimal string; ``doc_count``/``avg_length``:
    collection statistics. A query token repeated in the query counts once.

    ``top``: only the documents that may rank among the ``top`` best are wanted.
    Tokens are read rarest first, and once no document unseen so far could reach
    the ``top``-th best score of those seen, the commoner tokens only add to the
    documents already seen (the *MaxScore* idea). Every document scoring at least
    the ``top``-th best score is still returned, so ranking and ties are exact;
    only documents that cannot make the cut are left out. A document's score is
    the same number with or without ``top``: its terms are always added rarest
    token first. ``tf_max``: token -> an upper bound of its term frequencies
    (tighter bounds leave out more documents sooner; without it tf is unbounded).
    """
    avg = avg_length if avg_length > 0 else 1.0
    tokens = sorted(
        (t for t in dict.fromkeys(query_tokens) if postings.get(t)),
        key=lambda t: (len(postings[t]), t),
    )
    weights = [idf(doc_count, len(postings[t])) for t in tokens]
    scores: dict[str, float] = {}
    for i, token in enumerate(tokens):
        if top is not None and len(scores) >= top:
            kth = heapq.nlargest(top, scores.values())[-1]
            left = sum(
                _bound(weights[j], (tf_max or {}).get(tokens[j]), avg)
                for j in range(i, len(tokens))
            )
            # Partial sums only grow; an unseen document scores at most the bounds
            # left. The margin absorbs rounding.
            if left * (1.0 + 1e-9) < kth:
                for j in range(i, len(tokens)):
                    _add(scores, postings[tokens[j]], weights[j], avg, seen_only=True)
                return scores
        _add(scores, postings[token], weights[i], avg, seen_only=False)
    return scores


def _bound(weight: float, tf_max: int | None, avg: float) -> float:
    """The most one token can add to a score: its highest term frequency in the
    shortest document that can hold it (as long as that term frequency)."""
    if tf_max is None:  # tf / (tf + c) < 1
        return weight * (K1 + 1.0)
    return weight * tf_max * (K1 + 1.0) / (tf_max + K1 * (1.0 - B + B * tf_max / avg))


def _add(
    scores: dict[str, float],
    posting: Mapping[str, int | str],
    weight: float,
    avg: float,
    *,
    seen_only: bool,
) -> None:
    """Add one token's terms to ``scores`` (to the documents already there only,
    with ``seen_only``)."""
    items: Iterable[tuple[str, int | str]]
    if not seen_only:
        items = posting.items()
    elif len(posting) < len(scores):
        items = [(d, code) for d, code in posting.items() if d in scores]
    else:
        items = [(d, code) for d in scores if (code := posting.get(d)) is not None]
    # A term depends on the packed (tf, length) only, and few distinct ones occur.
    terms: dict[int | str, float] = {}
    for doc_id, code in items:
        term = terms.get(code)
        if term is None:
            length, tf = divmod(int(code), _DL_UNIT)
            term = terms[code] = weight * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * length / avg))
        scores[doc_id] = scores.get(doc_id, 0.0) + term
