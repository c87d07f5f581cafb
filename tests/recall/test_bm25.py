"""Tokenising and BM25 scoring: the arithmetic both lexical recall stores share."""

from __future__ import annotations

import math

import pytest

from jarvismem.recall.bm25 import idf, score_documents, term_frequencies, tokenize

# --- tokenizer and formula ----------------------------------------------------------------


def test_tokenize_lowercases_drops_stopwords_and_plural_s() -> None:
    assert tokenize("The Cats and THE dog's toys, café_bar!") == [
        "cat",
        "dog",
        "s",
        "toy",
        "café",
        "bar",
    ]


def test_idf_is_positive_and_rarer_is_higher() -> None:
    assert idf(10, 10) > 0
    assert idf(10, 1) > idf(10, 5)


def test_bm25_matches_the_formula_for_one_document() -> None:
    scores = score_documents(["x"], {"x": {"d": 2}}, {"d": 4}, doc_count=2, avg_length=2.0)
    k1, b = 1.2, 0.75
    expected = math.log(1 + (2 - 1 + 0.5) / 1.5) * 2 * (k1 + 1) / (2 + k1 * (1 - b + b * 2))
    assert scores["d"] == pytest.approx(expected)


def test_tokens_never_contain_underscores_so_index_bookkeeping_cannot_collide() -> None:
    # The Redis index keeps "__n__", "__dl__:<id>" beside token fields.
    assert all("_" not in t for t in tokenize("__n__ __dl__:x a_b snake_case_word"))


def test_short_words_and_ss_us_is_endings_keep_their_s() -> None:
    assert tokenize("gas glass virus axis cats") == ["gas", "glass", "virus", "axis", "cat"]


def test_term_frequencies_count_tokens_and_length() -> None:
    assert term_frequencies("Cats chase cats; the dog naps.") == (
        {"cat": 2, "chase": 1, "dog": 1, "nap": 1},
        5,
    )
    assert term_frequencies("the and of") == ({}, 0)


def test_scores_cover_only_documents_holding_a_query_token_and_repeats_count_once() -> None:
    postings = {"x": {"d1": 1}, "y": {"d2": 3}}
    lengths = {"d1": 2, "d2": 2}
    once = score_documents(["x"], postings, lengths, doc_count=3, avg_length=2.0)
    assert set(once) == {"d1"}
    twice = score_documents(["x", "x"], postings, lengths, doc_count=3, avg_length=2.0)
    assert twice == once
    assert score_documents(["z"], postings, lengths, doc_count=3, avg_length=2.0) == {}


def test_a_zero_average_length_does_not_divide_by_zero() -> None:
    scores = score_documents(["x"], {"x": {"d": 1}}, {}, doc_count=1, avg_length=0.0)
    assert scores["d"] > 0
