"""Retrieval scoring of the recall benchmark (no LLM): Recall@k, Hit@k and MRR.

For one question with evidence turns ``E`` and a ranked list of retrieved turns
(best first, at most ``max(k)`` long, possibly shorter: a lexical store returns
only the entries that match):

* Recall@k = |E ∩ top k| / |E|;
* Hit@k = 1 when at least one evidence turn is in the top k, else 0;
* MRR = 1 / (rank of the first evidence turn in the list), 0 when none is in it
  (so it is MRR at the list's length, ``max(k)``).

A figure over many questions is the plain mean over those questions (each
question weighs the same), overall and per category.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from benchmarks.recall_data import CATEGORIES


@dataclass(frozen=True, slots=True)
class Scored:
    """One question's figures: ``recall[k]``, ``hit[k]`` and ``rr`` (reciprocal rank)."""

    category: int
    recall: dict[int, float]
    hit: dict[int, float]
    rr: float


def score_question(
    ranked: Sequence[str], evidence: Iterable[str], ks: Sequence[int], category: int = 0
) -> Scored:
    """Score a ranked list of ids (best first) against the evidence ids."""
    wanted = set(evidence)
    if not wanted:
        raise ValueError("a question without evidence cannot be scored")
    if not ks or any(k <= 0 for k in ks):
        raise ValueError("k values must be positive")
    recall: dict[int, float] = {}
    hit: dict[int, float] = {}
    for k in ks:
        found = wanted.intersection(ranked[:k])
        recall[k] = len(found) / len(wanted)
        hit[k] = 1.0 if found else 0.0
    rr = next((1.0 / rank for rank, i in enumerate(ranked, 1) if i in wanted), 0.0)
    return Scored(category=category, recall=recall, hit=hit, rr=rr)


def summarise(scored: Sequence[Scored], ks: Sequence[int]) -> dict[str, float]:
    """``{"questions", "R@k"..., "Hit@k"..., "MRR"}``: the means over ``scored``
    (NaN figures when ``scored`` is empty)."""
    out: dict[str, float] = {"questions": float(len(scored))}
    for k in ks:
        out[f"R@{k}"] = _mean(s.recall[k] for s in scored)
    for k in ks:
        out[f"Hit@{k}"] = _mean(s.hit[k] for s in scored)
    out["MRR"] = _mean(s.rr for s in scored)
    return out


def by_category(scored: Sequence[Scored], ks: Sequence[int]) -> dict[str, dict[str, float]]:
    """``{"overall": summary, "<category name>": summary, ...}`` over every category
    of :data:`~benchmarks.recall_data.CATEGORIES` (present ones only)."""
    out = {"overall": summarise(scored, ks)}
    for number, name in CATEGORIES.items():
        group = [s for s in scored if s.category == number]
        if group:
            out[name] = summarise(group, ks)
    return out


def _mean(values: Iterable[float]) -> float:
    items = list(values)
    return statistics.fmean(items) if items else math.nan
