"""Ids, Redis keys and blob paths: safe, injective, tenant-isolated, cluster-friendly."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from redis.crc import key_slot

from jarvismem.backends.blob.base import validate_blob_path, validate_blob_prefix
from jarvismem.errors import InvalidIdError
from jarvismem.keys import (
    MAX_ID_LENGTH,
    MAX_LG_TOKEN_LENGTH,
    MAX_REVISION,
    KeySpace,
    lg_text,
    lg_token,
    validate_id,
    validate_revision,
    validate_turn_id,
)

FORBIDDEN = ("/", "\\", ":", "{", "}", "*", "?", "[", "]", "\x00")

valid_ids = st.from_regex(
    r"[A-Za-z0-9]([A-Za-z0-9._-]{0,14}[A-Za-z0-9_-])?", fullmatch=True
).filter(lambda s: ".." not in s)
# Text biased towards the characters that matter, plus arbitrary unicode.
hostile_text = (
    st.text(alphabet=st.sampled_from([*FORBIDDEN, ".", "a", "Z", "0", "_", "-", " ", "é", "\n"]))
    | st.text()
)


@dataclass(frozen=True)
class Ids:
    """One set of ids, as a kernel would pass them."""

    namespace: str
    workflow: str
    step: str
    agent: str
    turn: str
    tenant: str
    user: str
    session: str
    kind: str


ids_strategy = st.builds(Ids, *([valid_ids] * 9))


def redis_keys(ids: Ids) -> dict[str, str]:
    """Every Redis key of one id set, by the function (and arguments) that made it."""
    ks = KeySpace(ids.namespace)
    wf = ids.workflow
    scope = KeySpace.recall_scope(ids.namespace, ids.agent, ids.session)
    agent_scope = KeySpace.recall_scope(ids.namespace, ids.agent, None)
    return {
        f"ledger{(ks.namespace, wf)}": ks.ledger(wf),
        f"turn_index{(ks.namespace, wf)}": ks.turn_index(wf),
        f"checkpoint{(ks.namespace, wf, ids.step)}": ks.checkpoint(wf, ids.step),
        f"ltm_summary{(ks.namespace, wf)}": ks.ltm_summary(wf),
        f"ltm_state{(ks.namespace, wf)}": ks.ltm_state(wf),
        f"ltm_lock{(ks.namespace, wf)}": ks.ltm_lock(wf),
        f"spaces{(ks.namespace, wf, ids.agent)}": ks.spaces(wf, ids.agent),
        f"spaces_ops{(ks.namespace, wf, ids.agent)}": ks.spaces_ops(wf, ids.agent),
        f"workflow_pattern{(ks.namespace, wf)}": ks.workflow_pattern(wf),
        f"workflow_index{(ks.namespace,)}": ks.workflow_index(),
        f"athena_session{(ks.namespace, ids.tenant, ids.user, ids.agent)}": ks.athena_session(
            KeySpace.athena_destination(ids.tenant, ids.user, ids.agent, "http://athena.test")
        ),
        f"recall_entries{(ks.namespace, scope)}": ks.recall_entries(scope),
        f"recall_postings{(ks.namespace, scope)}": ks.recall_postings(scope),
        f"recall_entries{(ks.namespace, agent_scope)}": ks.recall_entries(agent_scope),
        f"recall_postings{(ks.namespace, agent_scope)}": ks.recall_postings(agent_scope),
    }


def blob_paths(ids: Ids) -> dict[str, str]:
    """Every blob path (and prefix) of one id set."""
    ks = KeySpace(ids.namespace)
    wf, step, agent = ids.workflow, ids.step, ids.agent
    return {
        f"scratchpad{(ks.namespace, wf, step, agent)}": ks.scratchpad(wf, step, agent),
        f"scratchpad_prefix{(ks.namespace, wf)}": ks.scratchpad_prefix(wf),
        f"goals{(ks.namespace, wf, step, agent)}": ks.goals(wf, step, agent),
        f"goals_prefix{(ks.namespace, wf)}": ks.goals_prefix(wf),
        f"ltm_blob{(ks.namespace, wf)}": ks.ltm_blob(wf),
        f"ltm_meta_blob{(ks.namespace, wf)}": ks.ltm_meta_blob(wf),
    }


def outbox_files(ids: Ids) -> dict[str, str]:
    ks = KeySpace(ids.namespace)
    return {
        f"outbox_file{(ks.namespace, ids.kind, ids.workflow)}": ks.outbox_file(
            ids.kind, ids.workflow
        )
    }


def turn_fields(ids: Ids) -> dict[str, str]:
    """Fields of the turn index hash."""
    return {
        f"turn_field{(ids.step, ids.agent, ids.turn)}": KeySpace.turn_field(
            ids.step, ids.agent, ids.turn
        )
    }


def recall_scopes(ids: Ids) -> dict[str, str]:
    """Recall scope keys (the hash tag of the recall keys)."""
    return {
        f"recall_scope{(ids.namespace, ids.agent, ids.session)}": KeySpace.recall_scope(
            ids.namespace, ids.agent, ids.session
        ),
        f"recall_scope{(ids.namespace, ids.agent, None)}": KeySpace.recall_scope(
            ids.namespace, ids.agent, None
        ),
    }


MAKERS: list[Callable[[Ids], dict[str, str]]] = [
    redis_keys,
    blob_paths,
    outbox_files,
    turn_fields,
    recall_scopes,
]


def assert_injective(*id_sets: Ids) -> None:
    """Within each kind of name, one output never comes from two different calls."""
    for maker in MAKERS:
        made_by: dict[str, str] = {}
        for ids in id_sets:
            for call, output in maker(ids).items():
                previous = made_by.setdefault(output, call)
                assert previous == call, f"{previous} and {call} both give {output!r}"


# --- (a) validate_id on arbitrary text -------------------------------------------------


@given(hostile_text)
def test_validated_id_never_holds_a_separator_or_traversal(text: str) -> None:
    try:
        value = validate_id(text)
    except InvalidIdError:
        return
    assert value == text
    assert not any(ch in value for ch in FORBIDDEN)
    assert ".." not in value
    assert not value.startswith(".")
    assert not value.endswith(".")
    assert 1 <= len(value) <= MAX_ID_LENGTH


@given(valid_ids)
def test_valid_ids_are_returned_unchanged(value: str) -> None:
    assert validate_id(value) == value


# --- (b) injectivity and tenant isolation ------------------------------------------------


@given(ids_strategy, ids_strategy)
def test_distinct_ids_give_distinct_keys_and_paths(a: Ids, b: Ids) -> None:
    assume(a != b)
    assert_injective(a, b)


@given(ids_strategy)
def test_one_id_set_gives_distinct_names_per_function(ids: Ids) -> None:
    assert_injective(ids)


@given(ids_strategy, ids_strategy)
def test_ids_differing_in_one_position_still_differ(a: Ids, b: Ids) -> None:
    # Random pairs rarely share most ids; this forces near-identical tuples,
    # where a sloppy join (e.g. "a:b" + "c" vs "a" + "b:c") would collide.
    for field in Ids.__dataclass_fields__:
        changed = Ids(**{**a.__dict__, field: getattr(b, field)})
        if changed != a:
            assert_injective(a, changed)


@given(ids_strategy, valid_ids)
def test_two_namespaces_never_share_a_key_or_path(ids: Ids, other_namespace: str) -> None:
    assume(other_namespace != ids.namespace)
    other = Ids(**{**ids.__dict__, "namespace": other_namespace})
    for maker in (redis_keys, blob_paths, outbox_files):
        assert not set(maker(ids).values()) & set(maker(other).values())


@given(ids_strategy, ids_strategy)
def test_workflow_scan_pattern_matches_only_that_workflows_keys(a: Ids, b: Ids) -> None:
    pattern = KeySpace(a.namespace).workflow_pattern(a.workflow)
    for key in redis_keys(b).values():
        if (
            key.endswith(":*")
            or "{recall:" in key
            or ":athena:" in key
            or key.endswith(":workflows")
        ):
            continue
        same_workflow = (a.namespace, a.workflow) == (b.namespace, b.workflow)
        assert fnmatch.fnmatchcase(key, pattern) == same_workflow, key


@given(ids_strategy)
def test_workflow_scan_pattern_matches_every_workflow_key(ids: Ids) -> None:
    pattern = KeySpace(ids.namespace).workflow_pattern(ids.workflow)
    ks = KeySpace(ids.namespace)
    for key in (
        ks.ledger(ids.workflow),
        ks.spaces(ids.workflow, ids.agent),
        ks.ltm_lock(ids.workflow),
    ):
        assert fnmatch.fnmatchcase(key, pattern)


# --- (c) one workflow, one cluster slot ---------------------------------------------------


@given(ids_strategy, valid_ids, valid_ids)
def test_all_keys_of_a_workflow_share_one_hash_slot(ids: Ids, step2: str, agent2: str) -> None:
    ks = KeySpace(ids.namespace)
    wf = ids.workflow
    keys = [
        ks.ledger(wf),
        ks.turn_index(wf),
        ks.checkpoint(wf, ids.step),
        ks.checkpoint(wf, step2),
        ks.ltm_summary(wf),
        ks.ltm_state(wf),
        ks.ltm_lock(wf),
        ks.spaces(wf, ids.agent),
        ks.spaces(wf, agent2),
        ks.spaces_ops(wf, ids.agent),
        ks.spaces_ops(wf, agent2),
    ]
    assert len({key_slot(k.encode()) for k in keys}) == 1
    # The tag is the workflow id itself, so the slot does not depend on the namespace.
    assert key_slot(keys[0].encode()) == key_slot(wf.encode())


@given(ids_strategy)
def test_recall_keys_of_a_scope_share_one_hash_slot(ids: Ids) -> None:
    ks = KeySpace(ids.namespace)
    scope = KeySpace.recall_scope(ids.namespace, ids.agent, ids.session)
    assert key_slot(ks.recall_entries(scope).encode()) == key_slot(
        ks.recall_postings(scope).encode()
    )


# --- (d) hostile ids -----------------------------------------------------------------------

HOSTILE: list[tuple[object, str]] = [
    ("..", "is not allowed"),
    ("../etc", "is not allowed"),
    ("a/../b", "is not allowed"),
    ("a..b", "without '..'"),
    ("a/b", "is not allowed"),
    ("a\\b", "is not allowed"),
    ("a\x00b", "is not allowed"),
    ("{x}", "is not allowed"),
    ("a}b", "is not allowed"),
    ("*", "is not allowed"),
    ("?", "is not allowed"),
    ("[a]", "is not allowed"),
    ("a:b", "is not allowed"),
    (".hidden", "starting with a letter or digit"),
    ("-flag", "starting with a letter or digit"),
    ("agent.", "not ending with '.'"),
    ("a b", "is not allowed"),
    ("a\nb", "is not allowed"),
    ("é", "is not allowed"),
    ("a" * (MAX_ID_LENGTH + 1), f"the limit is {MAX_ID_LENGTH}"),
    ("", "must not be empty"),
    (None, "must be a string, got NoneType"),
    (42, "must be a string, got int"),
    (b"bytes", "must be a string, got bytes"),
    (["a"], "must be a string, got list"),
]


@pytest.mark.parametrize(("value", "message"), HOSTILE, ids=[repr(v)[:20] for v, _ in HOSTILE])
def test_hostile_id_is_refused_with_a_specific_message(value: object, message: str) -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id(value, "workflow_id")
    assert str(info.value).startswith("workflow_id ")
    assert message in str(info.value)


def test_refusal_message_escapes_control_characters() -> None:
    with pytest.raises(InvalidIdError) as info:
        validate_id("a\x00b\nc")
    assert "\x00" not in str(info.value) and "\n" not in str(info.value)
    assert "\\x00" in str(info.value)


def test_longest_allowed_id_is_accepted() -> None:
    assert validate_id("a" * MAX_ID_LENGTH) == "a" * MAX_ID_LENGTH


@pytest.mark.parametrize(("value", "_message"), HOSTILE[:20])
def test_hostile_namespace_is_refused(value: object, _message: str) -> None:
    with pytest.raises(InvalidIdError, match="namespace"):
        KeySpace(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "kind"),
    [
        (lambda ks: ks.ledger("../x"), "workflow_id"),
        (lambda ks: ks.checkpoint("wf", "a:b"), "step_id"),
        (lambda ks: ks.spaces("wf", "{a}"), "agent_id"),
        (lambda ks: ks.spaces_ops("wf", "a}"), "agent_id"),
        (lambda ks: ks.scratchpad("wf", "s", "../../etc/passwd"), "agent_id"),
        (lambda ks: ks.goals("wf", "a/b", "x"), "step_id"),
        (lambda ks: KeySpace.athena_destination("t*", "u", "a", "http://h"), "tenant_id"),
        (lambda ks: KeySpace.athena_destination("t", "u?", "a", "http://h"), "user_id"),
        (lambda ks: ks.athena_session("t/u/a*/0123abcd"), "athena destination"),
        (lambda ks: ks.athena_session_lock("t/u/{a}/0123abcd"), "athena destination"),
        (lambda ks: ks.outbox_file("..", "wf"), "outbox kind"),
        (lambda ks: KeySpace.turn_field("s", "a", "t:1"), "turn_id"),
        (lambda ks: KeySpace.recall_scope("n", "a", "s/1"), "session_id"),
    ],
)
def test_every_key_function_validates_its_ids(call: Callable[[KeySpace], str], kind: str) -> None:
    with pytest.raises(InvalidIdError, match=kind):
        call(KeySpace("ns"))


@pytest.mark.parametrize(
    "scope", ["x}y", "n:a", "n:a:s:extra", "n:a:*", "n:{a}:s", "../n:a:s", "", "n::s"]
)
def test_recall_keys_refuse_a_malformed_scope(scope: str) -> None:
    with pytest.raises(InvalidIdError):
        KeySpace("ns").recall_entries(scope)
    with pytest.raises(InvalidIdError):
        KeySpace("ns").recall_postings(scope)


def test_turn_ids_may_be_ints_but_not_bools() -> None:
    assert validate_turn_id(7) == "7"
    assert KeySpace.turn_field("s", "a", 7) == KeySpace.turn_field("s", "a", "7")
    with pytest.raises(InvalidIdError, match="bool"):
        validate_turn_id(True)


def test_agent_wide_recall_scope_cannot_collide_with_a_session() -> None:
    assert KeySpace.recall_scope("n", "a", None) == "n:a:_"
    with pytest.raises(InvalidIdError):
        KeySpace.recall_scope("n", "a", "_")


# --- (e) blob paths are always valid blob paths --------------------------------------------


@given(ids_strategy)
def test_blob_paths_from_valid_ids_pass_blob_path_validation(ids: Ids) -> None:
    ks = KeySpace(ids.namespace)
    for path in (
        ks.scratchpad(ids.workflow, ids.step, ids.agent),
        ks.goals(ids.workflow, ids.step, ids.agent),
        ks.ltm_blob(ids.workflow),
        ks.ltm_meta_blob(ids.workflow),
        ks.outbox_file(ids.kind, ids.workflow),
    ):
        assert validate_blob_path(path) == path
    for prefix in (ks.scratchpad_prefix(ids.workflow), ks.goals_prefix(ids.workflow)):
        assert validate_blob_prefix(prefix) == prefix


@given(ids_strategy)
def test_scratchpads_live_under_their_listing_prefix(ids: Ids) -> None:
    ks = KeySpace(ids.namespace)
    path = ks.scratchpad(ids.workflow, ids.step, ids.agent)
    assert path.startswith(ks.scratchpad_prefix(ids.workflow))
    assert ks.goals(ids.workflow, ids.step, ids.agent).startswith(ks.goals_prefix(ids.workflow))


# --- revisions and import staging ---------------------------------------------------


def test_max_revision_is_the_largest_integer_a_double_holds_exactly() -> None:
    assert float(MAX_REVISION) == MAX_REVISION and float(MAX_REVISION + 1) == MAX_REVISION + 1
    assert float(MAX_REVISION + 2) == float(MAX_REVISION + 1)  # beyond: no longer exact


@pytest.mark.parametrize(
    ("value", "minimum", "ok"),
    [
        (0, 0, True),
        (MAX_REVISION, 1, True),
        (0, 1, False),
        (MAX_REVISION + 1, 0, False),
        (-1, 0, False),
        (True, 0, False),
        (1.0, 0, False),
        ("1", 0, False),
    ],
)
def test_validate_revision(value: object, minimum: int, ok: bool) -> None:
    if ok:
        assert validate_revision(value, minimum=minimum) == value
    else:
        with pytest.raises(InvalidIdError):
            validate_revision(value, minimum=minimum)


def _workflow_keys(ks: KeySpace, wf: str) -> list[str]:
    return [
        ks.ledger(wf),
        ks.turn_index(wf),
        ks.checkpoint(wf, "s"),
        ks.checkpoint_ops(wf, "s"),
        ks.ltm_summary(wf),
        ks.ltm_state(wf),
        ks.ltm_lock(wf),
        ks.spaces(wf, "a"),
        ks.spaces_ops(wf, "a"),
    ]


def _workflow_paths(ks: KeySpace, wf: str) -> list[str]:
    return [
        ks.scratchpad(wf, "s", "a"),
        ks.goals(wf, "s", "a"),
        ks.ltm_blob(wf),
        ks.ltm_meta_blob(wf),
    ]


@pytest.mark.parametrize("namespace", ["default", "tenant1"])
def test_staging_keys_share_the_slot_and_never_match_the_workflow(namespace: str) -> None:
    live = KeySpace(namespace)
    staged = live.staged("tok1")
    for key, twin in zip(_workflow_keys(live, "wf"), _workflow_keys(staged, "wf"), strict=True):
        assert twin != key and key_slot(twin.encode()) == key_slot(key.encode())
        assert not fnmatch.fnmatchcase(twin, live.workflow_pattern("wf"))
        assert fnmatch.fnmatchcase(twin, staged.staging_pattern("wf"))
        assert fnmatch.fnmatchcase(twin, live.staging_pattern("wf"))
        assert not fnmatch.fnmatchcase(twin, live.staged("tok2").staging_pattern("wf"))
        assert staged.unstaged_key("wf", twin) == key
    assert staged.import_pending("wf") == live.import_pending("wf")
    assert fnmatch.fnmatchcase(live.import_pending("wf"), live.workflow_pattern("wf"))
    # Keys outside a workflow are the live ones.
    assert staged.workflow_index() == live.workflow_index()


@pytest.mark.parametrize("namespace", ["default", "tenant1"])
def test_staging_paths_live_outside_every_workflow_and_map_back(namespace: str) -> None:
    live = KeySpace(namespace)
    staged = live.staged("tok1")
    for path, twin in zip(_workflow_paths(live, "wf"), _workflow_paths(staged, "wf"), strict=True):
        validate_blob_path(twin)
        assert twin.startswith(staged.staging_blob_prefix("wf"))
        assert twin.startswith(live.staging_blob_prefix("wf"))
        assert not twin.startswith(live.scratchpad_prefix("wf").split("/scratchpads/")[0])
        assert staged.unstaged_path("wf", twin) == path
        assert staged.staged_path("wf", path) == twin
    validate_blob_prefix(live.staging_blob_prefix("wf"))


def test_staging_translation_refuses_what_it_did_not_make() -> None:
    live = KeySpace("ns")
    staged = live.staged("tok1")
    with pytest.raises(InvalidIdError):
        staged.unstaged_key("wf", live.ledger("wf"))
    with pytest.raises(InvalidIdError):
        live.unstaged_key("wf", staged.ledger("wf"))
    with pytest.raises(InvalidIdError):
        staged.unstaged_path("wf", live.scratchpad("wf", "s", "a"))
    with pytest.raises(InvalidIdError):
        staged.staged_path("wf", live.scratchpad("other", "s", "a"))
    with pytest.raises(InvalidIdError):
        live.staged("a:b")


# --- LangGraph ids: one rule for the saver and the store -----------------------------------


@pytest.mark.parametrize(
    "value",
    ["1ef4f797-8335-6428-8001-8a1503f9b875", "parent:5f1e|child:9a2b", "/memories/notes.txt",
     "ü thread", "...", "a.b", "~a, b"],
)  # fmt: skip
def test_lg_text_keeps_free_text_ids(value: str) -> None:
    assert lg_text(value, "thread_id") == value


@pytest.mark.parametrize(
    "value",
    ["t\ud800", "t\x00x", "a\nb", "\x7f", "t" * (MAX_LG_TOKEN_LENGTH + 1), "../etc/passwd",
     "a/./b", "..", ".", "a\\..\\b", "", None, 3, b"bytes"],
)  # fmt: skip
def test_lg_text_refuses_what_breaks_a_key_a_reply_or_reads_as_a_path(value: object) -> None:
    with pytest.raises(InvalidIdError):
        lg_text(value, "thread_id")


def test_lg_text_allows_the_empty_root_namespace_only_when_asked() -> None:
    assert lg_text("", "checkpoint_ns", empty=True) == ""


@given(st.text(min_size=1, max_size=40))
def test_lg_token_of_every_accepted_id_is_key_safe_and_injective(value: str) -> None:
    try:
        lg_text(value, "thread_id")
    except InvalidIdError:
        return
    token = lg_token(value, "thread_id")
    assert not set(token) & set("{}:*?[]\\ ")
    # %XX escapes of UTF-8 bytes decode back to the id.
    assert unquote(token, errors="strict") == value
