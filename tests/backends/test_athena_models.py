"""Athena wire models: camelCase in, snake_case out, tolerant of nulls and missing fields."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from jarvismem.backends.athena_models import (
    AthenaContext,
    AthenaHealth,
    AthenaSearchResult,
    MidTermChain,
    StmEvent,
)


def test_context_parses_camel_case_and_dumps_snake_case() -> None:
    ctx = AthenaContext.model_validate(
        {
            "stmEvents": [{"role": "system", "type": "thought", "content": "hi", "blobUri": "b"}],
            "relevantPages": [{"id": "c1", "sessionId": "s1", "summary": "budget"}],
            "segments": None,
            "userPersona": {"tone": "dry"},
            "unknownField": 1,  # newer servers may add fields: ignored
        }
    )
    assert ctx.stm_events[0].blob_uri == "b"
    assert ctx.mid_term == ctx.relevant_pages and ctx.mid_term[0].session_id == "s1"
    assert ctx.segments == []
    out = ctx.to_dict()
    assert out["stm_events"][0]["content"] == "hi" and "stmEvents" not in out
    json.dumps(out)  # plain JSON


def test_nulls_and_odd_metadata_become_strings() -> None:
    event = StmEvent.model_validate(
        {"content": None, "metadata": {"n": 3, "missing": None}, "timestamp": 17}
    )
    assert event.content == "" and event.timestamp == "17"
    assert event.metadata == {"n": "3", "missing": ""}
    assert StmEvent.model_validate({"metadata": "not a map"}).metadata == {}
    chain = MidTermChain.model_validate({"embedding": None, "topic": None})
    assert chain.embedding == [] and chain.topic == ""


def test_search_result_score_is_a_distance() -> None:
    hit = AthenaSearchResult.model_validate({"content": "x", "similarityScore": 1.0})
    assert hit.distance == 1.0 and hit.similarity == 0.5
    assert AthenaSearchResult.model_validate({"similarityScore": None}).similarity == 1.0
    out = hit.to_dict()
    assert out["distance"] == 1.0 and out["similarity"] == 0.5
    assert out["similarity_score"] == 1.0


def test_models_are_frozen_and_typed() -> None:
    hit = AthenaSearchResult(content="x")
    with pytest.raises(ValidationError):
        hit.content = "y"
    with pytest.raises(ValidationError):
        AthenaSearchResult.model_validate({"similarityScore": "far"})


def test_health_reports_healthy_only_for_healthy() -> None:
    health = AthenaHealth.model_validate(
        {"status": "healthy", "dependencies": {"redis": "up", "llm": None}}
    )
    assert health.healthy and health.dependencies == {"redis": "up", "llm": ""}
    assert not AthenaHealth.model_validate({"status": "degraded"}).healthy
