"""The fake chat-completions server's wire behaviour (the client's tests use it too)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jarvismem.testing.fake_llm import (
    EMBEDDING_DIMENSIONS,
    FakeLLMServer,
    default_answer,
    hashed_embedding,
)

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "a\n\nb\nc\nd"}]


@pytest.fixture
def llm() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def _complete(llm: FakeLLMServer, **body: object) -> httpx.Response:
    return httpx.post(llm.url + "/chat/completions", json={"model": "m", **body}, timeout=10)


def test_the_default_answer_summarises_the_last_user_message(llm: FakeLLMServer) -> None:
    reply = _complete(llm, messages=MESSAGES)
    assert reply.status_code == 200
    answer = reply.json()
    assert answer["choices"][0]["message"]["content"] == "SUMMARY: a | b | c"
    assert answer["model"] == "m" and answer["object"] == "chat.completion"
    assert default_answer(MESSAGES) == "SUMMARY: a | b | c"
    [request] = llm.completion_requests()
    assert request.json["messages"] == MESSAGES and request.path == "/v1/chat/completions"


def test_models_and_unknown_paths(llm: FakeLLMServer) -> None:
    assert httpx.get(llm.url + "/models").json()["data"][0]["id"] == "fake-model"
    assert httpx.get(llm.url + "/nope").status_code == 404
    assert httpx.post(llm.url + "/nope", json={}).status_code == 404


def test_fail_next_answers_the_status_with_retry_after_then_recovers(llm: FakeLLMServer) -> None:
    llm.fail_next(1, status=429, retry_after=1.5)
    first = _complete(llm, messages=MESSAGES)
    assert first.status_code == 429 and first.headers["retry-after"] == "1.5"
    assert _complete(llm, messages=MESSAGES).status_code == 200


@pytest.mark.parametrize(
    ("mode", "status", "check"),
    [
        ("error", 500, lambda r: "fake server error" in r.text),
        ("garbage", 200, lambda r: r.headers["content-type"] == "text/html"),
        ("empty", 200, lambda r: r.json()["choices"][0]["message"]["content"] == ""),
        ("huge", 200, lambda r: len(r.json()["choices"][0]["message"]["content"]) == 200_000),
    ],
)
def test_modes(llm: FakeLLMServer, mode: str, status: int, check: object) -> None:
    llm.mode = mode
    reply = _complete(llm, messages=MESSAGES)
    assert reply.status_code == status and check(reply)  # type: ignore[operator]


def test_a_completion_without_messages_is_400(llm: FakeLLMServer) -> None:
    assert _complete(llm).status_code == 400


def test_reset_forgets_requests_failures_and_mode(llm: FakeLLMServer) -> None:
    llm.mode = "error"
    llm.fail_next(3)
    _complete(llm, messages=MESSAGES)
    llm.reset()
    assert llm.requests == [] and llm.mode == "ok"
    assert _complete(llm, messages=MESSAGES).status_code == 200


# --- /v1/embeddings ------------------------------------------------------------------------


def _embed(llm: FakeLLMServer, **body: object) -> httpx.Response:
    return httpx.post(llm.url + "/embeddings", json={"model": "e", **body}, timeout=10)


def test_embeddings_answer_in_the_openai_wire_format(llm: FakeLLMServer) -> None:
    reply = _embed(llm, input=["red apple", "green apple", "blue car"])
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "list" and body["model"] == "e" and "usage" in body
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert all(d["object"] == "embedding" for d in body["data"])
    vectors = [d["embedding"] for d in body["data"]]
    assert vectors[0] == hashed_embedding("red apple")
    assert all(len(v) == EMBEDDING_DIMENSIONS for v in vectors)
    assert all(abs(sum(x * x for x in v) - 1.0) < 1e-9 for v in vectors)
    [request] = llm.embedding_requests()
    assert request.json["input"] == ["red apple", "green apple", "blue car"]


def test_embeddings_of_texts_sharing_words_are_closer(llm: FakeLLMServer) -> None:
    a, b, c = (hashed_embedding(t) for t in ("red apple pie", "green apple pie", "blue car"))
    assert sum(x * y for x, y in zip(a, b, strict=True)) > 0.5
    assert sum(x * y for x, y in zip(a, c, strict=True)) < 0.5


def test_embedding_aliases_give_different_words_one_meaning(llm: FakeLLMServer) -> None:
    llm.embedding_aliases = {"automobile": "car", "sedan": "car"}
    body = _embed(llm, input=["automobile", "my red sedan", "car"]).json()
    automobile, sedan, car = (d["embedding"] for d in body["data"])
    assert automobile == car == hashed_embedding("car")
    assert sum(x * y for x, y in zip(automobile, sedan, strict=True)) > 0.5
    assert hashed_embedding("automobile") != car  # without the alias: another word


def test_embeddings_take_a_string_dimensions_and_base64(llm: FakeLLMServer) -> None:
    import base64
    import struct

    single = _embed(llm, input="one text", dimensions=8).json()["data"]
    assert len(single) == 1 and len(single[0]["embedding"]) == 8
    packed = _embed(llm, input=["one text"], dimensions=8, encoding_format="base64").json()
    raw = base64.b64decode(packed["data"][0]["embedding"])
    assert list(struct.unpack("<8f", raw)) == pytest.approx(single[0]["embedding"])


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"input": []},
        {"input": [""]},
        {"input": [1, 2]},
        {"input": "x", "dimensions": 0},
        {"input": "x", "encoding_format": "int8"},
    ],
)
def test_bad_embedding_requests_are_400(llm: FakeLLMServer, body: dict[str, object]) -> None:
    reply = _embed(llm, **body)
    assert reply.status_code == 400 and reply.json()["error"]["message"]


def test_embedding_faults_are_separate_from_chat_faults(llm: FakeLLMServer) -> None:
    llm.fail_next(1, status=429, retry_after=2, endpoint="embeddings")
    assert _complete(llm, messages=MESSAGES).status_code == 200
    failed = _embed(llm, input="x")
    assert failed.status_code == 429 and failed.headers["retry-after"] == "2"
    assert _embed(llm, input="x").status_code == 200
    llm.mode = "error"
    assert _embed(llm, input="x").status_code == 500
    llm.mode = "garbage"
    assert _embed(llm, input="x").headers["content-type"] == "text/html"
    llm.mode = "empty"
    assert _embed(llm, input="x").json()["data"] == []
