"""Tokenising and BM25 scoring: the arithmetic both lexical recall stores share."""

from __future__ import annotations

import math
import random
from datetime import UTC, datetime

import pytest

from jarvismem.recall.bm25 import (
    K1,
    TF_CAP,
    B,
    date_tokens,
    document_tokens,
    idf,
    pack,
    score_documents,
    term_frequencies,
    tokenize,
)

# --- tokenizer ------------------------------------------------------------------------------


def test_tokenize_lowercases_drops_stopwords_and_stems() -> None:
    assert tokenize("The Cats and THE dog's toys, café_bar!") == [
        "cat",
        "dog",
        "toy",
        "café",
        "bar",
    ]


def test_inflections_share_one_stem() -> None:
    assert len(set(tokenize("painted painting paints paint"))) == 1
    assert tokenize("adopting") == tokenize("adoption") == tokenize("adopted")
    assert tokenize("researching") == tokenize("research")


def test_question_words_and_auxiliaries_are_stopwords() -> None:
    assert tokenize("When did she go? What was it? How would you know?") == ["go", "know"]


def test_tokens_never_contain_underscores_so_index_bookkeeping_cannot_collide() -> None:
    # The Redis index keeps "__n__", "__dl__:<id>" beside token fields.
    assert all("_" not in t for t in tokenize("__n__ __dl__:x a_b snake_case_word"))


@pytest.mark.parametrize(
    "text",
    [
        "May 8, 2023",
        "May 8th 2023",
        "8 May 2023",
        "8 May, 2023",
        "8th of May, 2023",
        "2023-05-08",
        "2023-05-08T13:56:00Z",
        "may 8 2023",
    ],
)
def test_the_usual_ways_of_writing_a_date_give_the_same_tokens(text: str) -> None:
    dated = tokenize(text)
    assert dated[:3] == ["2023", "may", "may8"], dated


def test_a_month_and_year_give_year_and_month_and_a_date_in_a_sentence_is_found() -> None:
    assert tokenize("in May 2023") == ["2023", "may"]
    assert tokenize("Aug 2023") == tokenize("August, 2023") == ["2023", "august"]
    assert tokenize("1:56 pm on 8 May, 2023") == ["1", "56", "pm", "2023", "may", "may8"]
    assert tokenize("Sept. 14 meeting") == [*tokenize("September 14"), "meet"]


def test_may_alone_is_the_modal_verb_but_other_months_are_words() -> None:
    assert tokenize("I may go in June") == ["go", "june"]
    assert tokenize("june") == date_tokens(_ms(2023, 6, 1))[1:2]


def test_impossible_dates_stay_plain_numbers() -> None:
    assert tokenize("May 45 things") == ["45", "thing"]
    assert tokenize("running 2023-13-40") == ["run", "2023", "13", "40"]


def test_numbers_are_normalised() -> None:
    assert tokenize("10,000 people, 05 days, the 3rd time") == [
        "10000",
        "peopl",
        "5",
        "day",
        "3",
        "time",
    ]
    assert tokenize("0 00") == ["0", "0"]


def _ms(year: int, month: int, day: int) -> int:
    return int(datetime(year, month, day, 13, 56, tzinfo=UTC).timestamp() * 1000)


def test_date_tokens_are_those_of_the_written_date() -> None:
    assert date_tokens(_ms(2023, 5, 8)) == tokenize("8 May 2023")
    assert date_tokens(_ms(1999, 12, 31)) == tokenize("December 31, 1999")


def test_document_tokens_add_indexed_metadata_and_the_day() -> None:
    tokens = document_tokens(
        "Caroline painted",
        occurred_at=_ms(2023, 5, 8),
        metadata={"speaker": "Caroline", "place": "Paris", "secret": "zebra"},
        indexed_metadata=("place", "speaker", "missing"),
    )
    assert tokens == ["carolin", "paint", "pari", "carolin", "2023", "may", "may8"]
    assert document_tokens("Caroline painted") == ["carolin", "paint"]


def test_term_frequencies_count_tokens_and_length() -> None:
    assert term_frequencies("Cats chase cats; the dog naps.") == (
        {"cat": 2, "chase": 1, "dog": 1, "nap": 1},
        5,
    )
    assert term_frequencies("the and of") == ({}, 0)
    assert term_frequencies(["a", "b", "a"]) == ({"a": 2, "b": 1}, 3)


# --- the formula ----------------------------------------------------------------------------


def test_idf_is_positive_and_rarer_is_higher() -> None:
    assert idf(10, 10) > 0
    assert idf(10, 1) > idf(10, 5)


def test_bm25_matches_the_formula_for_one_document() -> None:
    scores = score_documents(["x"], {"x": {"d": pack(2, 4)}}, doc_count=2, avg_length=2.0)
    expected = math.log(1 + (2 - 1 + 0.5) / 1.5) * 2 * (K1 + 1) / (2 + K1 * (1 - B + B * 2))
    assert scores["d"] == pytest.approx(expected)


def test_packed_codes_may_be_decimal_strings() -> None:
    as_int = score_documents(["x"], {"x": {"d": pack(2, 4)}}, doc_count=2, avg_length=2.0)
    as_text = score_documents(["x"], {"x": {"d": f"+{pack(2, 4)}"}}, doc_count=2, avg_length=2.0)
    assert as_int == as_text


def test_term_frequency_is_capped_in_the_packed_code() -> None:
    assert pack(TF_CAP + 10, 5) == pack(TF_CAP, 5)


def test_scores_cover_only_documents_holding_a_query_token_and_repeats_count_once() -> None:
    postings = {"x": {"d1": pack(1, 2)}, "y": {"d2": pack(3, 2)}}
    once = score_documents(["x"], postings, doc_count=3, avg_length=2.0)
    assert set(once) == {"d1"}
    twice = score_documents(["x", "x"], postings, doc_count=3, avg_length=2.0)
    assert twice == once
    assert score_documents(["z"], postings, doc_count=3, avg_length=2.0) == {}


def test_a_zero_average_length_does_not_divide_by_zero() -> None:
    scores = score_documents(["x"], {"x": {"d": pack(1, 1)}}, doc_count=1, avg_length=0.0)
    assert scores["d"] > 0


def _random_collection(rnd: random.Random) -> tuple[dict[str, dict[str, int]], int, float]:
    vocabulary = [f"t{i}" for i in range(rnd.randint(1, 8))]
    counts: dict[str, dict[str, int]] = {}
    lengths: dict[str, int] = {}
    for d in range(rnd.randint(1, 60)):
        words = [rnd.choice(vocabulary) for _ in range(rnd.randint(1, 6))]
        lengths[f"d{d}"] = len(words)
        for w in words:
            counts.setdefault(w, {})
            counts[w][f"d{d}"] = counts[w].get(f"d{d}", 0) + 1
    postings = {
        t: {d: pack(tf, lengths[d]) for d, tf in docs.items()} for t, docs in counts.items()
    }
    return postings, len(lengths), sum(lengths.values()) / len(lengths)


def test_pruning_for_the_top_k_keeps_every_document_that_can_make_the_cut() -> None:
    rnd = random.Random(19)
    pruned_somewhere = False
    for _ in range(2000):
        postings, count, avg = _random_collection(rnd)
        tf_max = {t: max(c % 2**24 for c in docs.values()) for t, docs in postings.items()}
        query = [rnd.choice([*postings, "zz"]) for _ in range(rnd.randint(1, 5))]
        full = score_documents(query, postings, count, avg)
        top = rnd.randint(1, 12)
        for bounds in (tf_max, None):
            pruned = score_documents(query, postings, count, avg, top=top, tf_max=bounds)
            # Same numbers for every document kept ...
            assert all(full[d] == s for d, s in pruned.items())
            # ... and every document scoring at least the top-th best score kept.
            if full:
                cut = sorted(full.values(), reverse=True)[min(top, len(full)) - 1]
                assert {d for d, s in full.items() if s >= cut} <= set(pruned)
            pruned_somewhere |= len(pruned) < len(full)
    assert pruned_somewhere, "the check never exercised pruning"
