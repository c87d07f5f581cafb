"""redact_object / redact_named: redaction of the Python objects LangGraph stores."""

from __future__ import annotations

from collections import OrderedDict, defaultdict, namedtuple
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel

from jarvismem.errors import InvalidPayloadError
from jarvismem.redaction import (
    MAX_OBJECT_DEPTH,
    REDACTED,
    default_redactor,
    is_secret_key,
    redact_named,
    redact_object,
)
from tests.secret_corpus import ORDINARY, SECRETS, STRIPE_LIVE

Pair = namedtuple("Pair", "left right")


@dataclass(frozen=True)
class Login:
    user: str
    password: str
    note: str


class Message(BaseModel):
    content: str
    extra: dict[str, Any] = {}


def _redact(value: Any) -> Any:
    return redact_object(value, default_redactor, is_secret_key)


@pytest.mark.parametrize(("family", "text", "secret"), SECRETS, ids=[s[0] for s in SECRETS])
def test_every_corpus_secret_is_hidden_inside_objects(family: str, text: str, secret: str) -> None:
    value = {"out": [Pair(text, 1)], "msg": Message(content=text), "set": {text}}
    assert secret not in repr(_redact(value))


def test_a_value_without_secrets_is_the_same_object() -> None:
    value = {"texts": list(ORDINARY), "pair": Pair("a", (1, 2)), "raw": b"\x00", "n": 3.5}
    assert _redact(value) is value


def test_changed_containers_keep_their_types() -> None:
    factory = defaultdict(list, {"token": "x"})
    value = {
        "pair": Pair(STRIPE_LIVE, 2),
        "tuple": ("a", STRIPE_LIVE),
        "dd": factory,
        "od": OrderedDict(password="p"),
        "set": frozenset({STRIPE_LIVE}),
    }
    out = _redact(value)
    assert out["pair"] == Pair(REDACTED, 2)
    assert out["tuple"] == ("a", REDACTED)
    assert isinstance(out["dd"], defaultdict) and out["dd"].default_factory is list
    assert out["dd"] == {"token": REDACTED} and factory == {"token": "x"}
    assert isinstance(out["od"], OrderedDict) and out["od"] == {"password": REDACTED}
    assert out["set"] == frozenset({REDACTED})


def test_dataclasses_and_pydantic_models_are_copied_redacted() -> None:
    login = Login("alice", "hunter2-Zq81", f"key {STRIPE_LIVE}")
    message = Message(content=f"use {STRIPE_LIVE}", extra={"api_key": "abc"})
    out_login, out_message = _redact([login, message])
    assert out_login == Login("alice", REDACTED, f"key {REDACTED}")
    assert out_message == Message(content=f"use {REDACTED}", extra={"api_key": REDACTED})
    assert login.password == "hunter2-Zq81" and message.extra == {"api_key": "abc"}


def test_a_secret_named_channel_is_hidden_whole() -> None:
    assert redact_named("api_token", {"v": 1}, default_redactor, is_secret_key) == REDACTED
    assert redact_named("token_count", 512, default_redactor, is_secret_key) == 512
    assert redact_named("password", None, default_redactor, is_secret_key) is None


def test_too_deep_or_self_containing_values_are_refused() -> None:
    deep: list[Any] = []
    node = deep
    for _ in range(MAX_OBJECT_DEPTH + 1):
        node.append([])
        node = node[0]
    loop: list[Any] = []
    loop.append(loop)
    for value in (deep, loop):
        with pytest.raises(InvalidPayloadError, match="nested deeper"):
            _redact(value)
