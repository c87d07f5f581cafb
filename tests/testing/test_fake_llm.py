"""The fake chat-completions server's wire behaviour (the client's tests use it too)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jarvismem.testing.fake_llm import FakeLLMServer, default_answer

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
