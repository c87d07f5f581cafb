"""MemoryPolicy: defaults, coercion, validation, namespace and session resolution, requests."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from jarvismem.errors import (
    InvalidIdError,
    InvalidPolicyError,
    NamespaceContextMissingError,
    SessionIdRequiredError,
)
from jarvismem.recall import MemoryPolicy, RecallRequest


def test_defaults() -> None:
    policy = MemoryPolicy()
    assert (policy.enabled, policy.scope, policy.namespace, policy.namespace_from) == (
        True,
        "agent",
        "default",
        None,
    )
    assert (policy.capture, policy.inject, policy.max_entries) == ("manual", "instructions", 5)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("true", True), ("FALSE", False), ("1", True), ("0", False), (" Yes ", True), ("off", False)],
)
def test_enabled_is_coerced_from_strings(raw: str, expected: bool) -> None:
    assert MemoryPolicy.parse(enabled=raw).enabled is expected


def test_enums_are_case_insensitive_and_ints_coerced() -> None:
    policy = MemoryPolicy.parse(
        {"scope": "SESSION", "capture": " Conversation", "inject": "Context", "max_entries": "7"}
    )
    assert (policy.scope, policy.capture, policy.inject, policy.max_entries) == (
        "session",
        "conversation",
        "context",
        7,
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("enabled", "maybe"),
        ("scope", "global"),
        ("capture", "always"),
        ("inject", "system"),
        ("max_entries", "0"),
        ("max_entries", "five"),
        ("namespace", "a/b"),
        ("namespace_from", " "),
        ("unknown", "x"),
    ],
)
def test_invalid_values_name_the_field(field: str, value: Any) -> None:
    with pytest.raises(InvalidPolicyError, match=field):
        MemoryPolicy.parse({field: value})


def test_invalid_value_is_not_echoed() -> None:
    with pytest.raises(InvalidPolicyError) as info:
        MemoryPolicy.parse(scope="sk-secret-value")
    assert "sk-secret-value" not in str(info.value)


def test_namespace_and_namespace_from_are_exclusive() -> None:
    with pytest.raises(InvalidPolicyError, match="not both"):
        MemoryPolicy.parse(namespace="a", namespace_from="tenant_id")


def test_direct_construction_raises_validation_error() -> None:
    with pytest.raises(ValidationError):
        MemoryPolicy(max_entries=0)


def test_resolve_fixed_namespace_ignores_context() -> None:
    assert MemoryPolicy(namespace="team-a").resolve_namespace({"tenant_id": "x"}) == "team-a"


def test_resolve_namespace_from_context() -> None:
    policy = MemoryPolicy(namespace_from="tenant_id")
    assert policy.namespace is None
    assert policy.resolve_namespace({"tenant_id": "acme"}) == "acme"


@pytest.mark.parametrize("context", [None, {}, {"tenant_id": ""}, {"other": "x"}])
def test_missing_namespace_context_is_a_clear_error(context: dict[str, str] | None) -> None:
    with pytest.raises(NamespaceContextMissingError, match="tenant_id"):
        MemoryPolicy(namespace_from="tenant_id").resolve_namespace(context)


def test_namespace_from_context_must_be_a_valid_id() -> None:
    with pytest.raises(InvalidIdError):
        MemoryPolicy(namespace_from="tenant_id").resolve_namespace({"tenant_id": "../x"})


def test_agent_scope_ignores_session() -> None:
    assert MemoryPolicy(scope="agent").scope_session("s1") is None


def test_session_scope_uses_session() -> None:
    assert MemoryPolicy(scope="session").scope_session("s1") == "s1"


@pytest.mark.parametrize("session_id", [None, ""])
def test_session_scope_without_session_is_a_clear_error(session_id: str | None) -> None:
    with pytest.raises(SessionIdRequiredError):
        MemoryPolicy(scope="session").scope_session(session_id)


def test_recall_request_follows_the_policy() -> None:
    policy = MemoryPolicy(scope="session", namespace_from="tenant", max_entries=3)
    request = policy.recall_request(
        agent_id="a1", query="q", session_id="s1", context={"tenant": "acme"}
    )
    assert request == RecallRequest(
        agent_id="a1", session_id="s1", namespace="acme", query="q", limit=3
    )


def test_write_request_merges_policy_metadata() -> None:
    policy = MemoryPolicy(metadata={"origin": "policy", "team": "x"})
    request = policy.write_request(agent_id="a1", content="c", metadata={"team": "y"})
    assert request.metadata == {"origin": "policy", "team": "y", "source": "manual"}
    assert request.session_id is None and request.namespace == "default"


def test_write_request_marks_its_source_over_the_policy_labels() -> None:
    # The seed's troubleshooting filters on metadata["source"]: a policy label
    # must not hide whether an entry was captured or written on purpose.
    policy = MemoryPolicy(metadata={"source": "policy"})
    assert policy.write_request(agent_id="a1", content="c").metadata == {"source": "manual"}
    captured = policy.write_request(agent_id="a1", content="c", source="conversation")
    assert captured.metadata == {"source": "conversation"}
    # A label the caller gives for this one write is its own choice, and kept.
    mine = policy.write_request(agent_id="a1", content="c", metadata={"source": "import"})
    assert mine.metadata == {"source": "import"}


@pytest.mark.parametrize("switch", [True, "true", " TRUE ", "yes", "on", "1", 1])
def test_memory_true_is_the_default_policy(switch: Any) -> None:
    # The seed's `memory: true`.
    assert MemoryPolicy.parse(switch) == MemoryPolicy()


@pytest.mark.parametrize("switch", [False, "false", "False", "no", "off", "0", 0])
def test_memory_false_disables_memory(switch: Any) -> None:
    # The seed's `memory: false`; before, parse(False) gave an enabled policy.
    policy = MemoryPolicy.parse(switch)
    assert policy == MemoryPolicy(enabled=False)
    assert policy.enabled is False


def test_a_boolean_policy_takes_overrides_and_none_is_the_default() -> None:
    assert MemoryPolicy.parse(False, max_entries=2) == MemoryPolicy(enabled=False, max_entries=2)
    assert MemoryPolicy.parse(True, capture="conversation").capture == "conversation"
    assert MemoryPolicy.parse(None) == MemoryPolicy.parse({}) == MemoryPolicy()


@pytest.mark.parametrize("bad", ["maybe", "sk-secret-value", 2, 1.5, ["enabled"]])
def test_a_policy_that_is_neither_fields_nor_a_boolean_is_refused(bad: Any) -> None:
    with pytest.raises(InvalidPolicyError, match="mapping of policy fields or a boolean") as info:
        MemoryPolicy.parse(bad)
    assert "sk-secret-value" not in str(info.value)
