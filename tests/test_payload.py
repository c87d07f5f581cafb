"""payload.clean_value: iterative cleaning, the size policy, the depth cap, secret keys."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jarvismem.defaults import MAX_PAYLOAD_DEPTH, MAX_TURN_FIELD_CHARS
from jarvismem.errors import InvalidPayloadError
from jarvismem.payload import (
    MAX_UTF8_BYTES_PER_CHAR,
    TRUNCATION_KEYS,
    PayloadPolicy,
    clean_value,
    max_field_chars_for,
    truncate_text,
    turn_record_max_bytes,
)
from jarvismem.records import compact_json, encode_record, turn_record
from jarvismem.redaction import REDACTED, default_redactor, no_redaction, secret_key_matcher

LIMIT = 1000


def clean(value: Any, *, max_chars: int = LIMIT, max_depth: int = 64, **kw: Any) -> Any:
    return clean_value(
        value,
        redact=kw.pop("redact", default_redactor),
        is_secret_key=kw.pop("is_secret_key", secret_key_matcher()),
        max_chars=max_chars,
        max_depth=max_depth,
        field="result",
    )


def nested(levels: int) -> list[Any]:
    """``levels`` lists, one inside the other (built without recursion)."""
    root: list[Any] = []
    inner = root
    for _ in range(levels - 1):
        child: list[Any] = []
        inner.append(child)
        inner = child
    return root


# --- types -------------------------------------------------------------------------------


def test_json_data_comes_back_equal_and_tuples_and_bytes_become_json() -> None:
    value = {"a": [1, 2.5, None, True, "x"], "b": {"c": ("d", b"e\xff")}, 3: "k", None: 1}
    assert clean(value, redact=no_redaction) == {
        "a": [1, 2.5, None, True, "x"],
        "b": {"c": ["d", "e\ufffd"]},
        "3": "k",
        "null": 1,
    }


@pytest.mark.parametrize("bad", [{1, 2}, [object()], {"k": frozenset()}, {(1, 2): "tuple key"}])
def test_values_json_cannot_hold_are_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(InvalidPayloadError, match=r"^result: "):
        clean(bad)


def test_unpaired_surrogates_and_unprintable_ints_are_refused() -> None:
    with pytest.raises(InvalidPayloadError, match="surrogates"):
        clean(["ok", "\ud800"])
    with pytest.raises(InvalidPayloadError, match="surrogates"):
        clean("\udfff")
    with pytest.raises(InvalidPayloadError, match="int too long"):
        clean([10**5000])


# --- depth ----------------------------------------------------------------------------------


@pytest.mark.parametrize("levels", [65, 495, 10_000, 200_000])
def test_nesting_deeper_than_the_cap_is_refused_without_recursion(levels: int) -> None:
    with pytest.raises(InvalidPayloadError, match=r"^result: nesting deeper than 64 levels$"):
        clean(nested(levels))


def test_nesting_at_the_cap_is_kept() -> None:
    assert clean(nested(64)) == nested(64)
    deep_dict: dict[str, Any] = {}
    inner = deep_dict
    for _ in range(63):
        inner["k"] = {}
        inner = inner["k"]
    assert clean(deep_dict) == deep_dict


def test_a_reference_cycle_is_refused_like_deep_nesting() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(InvalidPayloadError, match="nesting deeper"):
        clean(loop)


# --- size -------------------------------------------------------------------------------------


def test_a_long_string_keeps_the_documented_marker() -> None:
    assert clean("y" * 1500) == "y" * LIMIT + "…[truncated 500 chars]"
    assert truncate_text("short", 10) == "short"


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
def test_a_huge_list_becomes_a_marker_saying_what_was_cut_within_the_limit() -> None:
    big = list(range(2_000_000))  # ~15 MB of JSON
    start = time.perf_counter()
    out = clean(big, max_chars=65_536)
    elapsed = time.perf_counter() - start
    assert tuple(out) == TRUNCATION_KEYS
    assert out["kind"] == "list" and out["items"] == 2_000_000
    assert out["truncated"].startswith("[0,1,2,3,")
    assert out["kept_chars"] == len(out["truncated"])
    assert len(compact_json(out)) <= 65_536
    # Cleaning stops once the cut is certain: far less than a pass over 2M items.
    assert elapsed < 0.5


@pytest.mark.serial  # bounds a wall-clock time, which a loaded machine stretches
def test_a_list_of_huge_ints_is_cut_as_early_as_its_text_would_be() -> None:
    start = time.perf_counter()
    out = clean([10**4299] * 10_000, max_chars=65_536)  # 43 MB of digits
    assert time.perf_counter() - start < 0.5
    assert out["items"] == 10_000 and out["truncated"].startswith("[1000")


def test_a_huge_dict_and_many_small_strings_are_bounded_too() -> None:
    out = clean({f"k{i}": "v" * 50 for i in range(100_000)})
    assert out["kind"] == "dict" and out["items"] == 100_000
    assert out["truncated"].startswith('{"k0":"vvv')
    assert len(compact_json(out)) <= LIMIT


def test_the_marker_fits_even_when_every_kept_char_needs_escaping() -> None:
    out = clean(['"\\' * 400] * 5)
    assert len(compact_json(out)) <= LIMIT
    assert out["kept_chars"] > LIMIT // 3


def test_a_structure_just_under_the_limit_is_kept_whole() -> None:
    value = ["x" * 100] * 9  # 9 * 102 + 8 commas + 2 brackets = 928 chars
    assert clean(value) == value


def test_a_cut_structure_keeps_only_cleaned_text() -> None:
    secret = "sk-" + "A1b2C3d4" * 4
    out = clean([{"note": f"key {secret}", "password": "hunter2"}] * 100)
    assert secret not in out["truncated"] and "hunter2" not in out["truncated"]


# --- secrets ----------------------------------------------------------------------------------


def test_values_under_secret_keys_are_replaced_whatever_their_type() -> None:
    out = clean(
        {
            "password": "hunter2",
            "api_key": {"nested": ["deep", 1]},
            "db_password": 12345,
            "token_count": 512,
            "user": "alice",
        }
    )
    assert out == {
        "password": REDACTED,
        "api_key": REDACTED,
        "db_password": REDACTED,
        "token_count": 512,
        "user": "alice",
    }


def test_a_secret_key_hides_even_a_value_too_deep_to_store() -> None:
    assert clean({"secret": nested(1000)}) == {"secret": REDACTED}


def test_keys_themselves_are_redacted() -> None:
    secret = "sk-" + "A1b2C3d4" * 4
    out = clean({f"cache[{secret}]": 1})
    assert list(out) == [f"cache[{REDACTED}]"]


def test_a_local_stand_in_matcher_is_honoured() -> None:
    out = clean({"pin": "1234", "x": "y"}, is_secret_key=lambda k: k.lower() in {"pin"})
    assert out == {"pin": REDACTED, "x": "y"}


# --- record bounds ----------------------------------------------------------------------------


def test_a_turn_record_of_three_worst_case_fields_stays_under_the_computed_bound() -> None:
    limit = 4096
    worst_string = clean("\x01" * (limit * 2), max_chars=limit)  # every char escapes to 6 bytes
    worst_struct = clean(["\U0001f600" * 500] * 100, max_chars=limit)  # 4-byte chars
    assert len(compact_json(worst_struct)) <= limit
    for fields in ((worst_string,) * 3, (worst_struct,) * 3):
        turn = dict(zip(("thought", "action", "result"), fields, strict=True), tokens=10**4000)
        record = encode_record(turn_record("t" * 256, turn, time.time()))
        assert len(record) <= turn_record_max_bytes(limit)
    assert len(compact_json(worst_struct).encode()) <= MAX_UTF8_BYTES_PER_CHAR * limit


def test_the_largest_field_limit_for_an_append_size_round_trips() -> None:
    azure = 4 * 1024 * 1024
    chars = max_field_chars_for(azure)
    assert turn_record_max_bytes(chars) <= azure < turn_record_max_bytes(chars + 1)
    assert turn_record_max_bytes(65_536) < azure  # the default limit fits Azure


def test_the_cleaned_value_is_always_encodable() -> None:
    out = clean({"a": [b"\x00\xff", 1.5, float("inf")], "b": ("t",)})
    assert json.loads(compact_json(out)) == out


JSON_LIKE = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats()
    | st.text(max_size=60)
    | st.binary(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=8)
        | st.dictionaries(st.text(max_size=12) | st.integers(), inner, max_size=8)
    ),
    max_leaves=60,
)


@settings(max_examples=300, deadline=None)
@given(value=JSON_LIKE, max_chars=st.integers(min_value=256, max_value=2000))
def test_any_json_like_value_comes_back_encodable_within_the_limit(
    value: Any, max_chars: int
) -> None:
    try:
        out = clean(value, max_chars=max_chars, redact=no_redaction)
    except InvalidPayloadError as exc:
        # Only lone surrogates in generated text are refused here.
        assert "surrogates" in str(exc)
        return
    encoded = compact_json(out)
    encoded.encode("utf-8")
    if isinstance(value, str | bytes):
        assert len(out) <= max_chars + 32
    else:
        assert len(encoded) <= max_chars


def test_check_depth_counts_containers_and_never_recurses() -> None:
    from jarvismem.payload import check_depth

    check_depth({"a": [1, {"b": 2}]}, max_depth=3)
    with pytest.raises(InvalidPayloadError, match="nesting deeper than 2"):
        check_depth({"a": [1, {"b": 2}]}, max_depth=2, field="value")
    deep: object = 0
    for _ in range(200_000):
        deep = {"k": deep}
    with pytest.raises(InvalidPayloadError):
        check_depth(deep)


def test_a_payload_policy_cleans_as_clean_value_with_its_own_knobs() -> None:
    policy = PayloadPolicy(
        redact=default_redactor, is_secret_key=secret_key_matcher(), max_chars=40, max_depth=3
    )
    value = {"password": {"x": 1}, "note": "token=sk-" + "a" * 40, "long": "y" * 100}
    assert policy.clean(value, "data") == clean_value(
        value,
        redact=default_redactor,
        is_secret_key=secret_key_matcher(),
        max_chars=40,
        max_depth=3,
        field="data",
    )
    with pytest.raises(InvalidPayloadError, match=r"^data: nesting deeper than 3"):
        policy.clean([[[["deep"]]]], "data")


def test_the_default_payload_policy_bounds_but_does_not_redact() -> None:
    policy = PayloadPolicy()
    assert policy.clean({"password": "hunter2"}) == {"password": "hunter2"}
    assert (policy.max_chars, policy.max_depth) == (MAX_TURN_FIELD_CHARS, MAX_PAYLOAD_DEPTH)


@pytest.mark.parametrize("bounds", [{"max_chars": 0}, {"max_depth": -1}, {"max_chars": True}])
def test_a_payload_policy_refuses_a_bound_that_is_not_a_positive_int(
    bounds: dict[str, Any],
) -> None:
    with pytest.raises(ValueError, match="must be a positive int"):
        PayloadPolicy(**bounds)


def test_a_payload_policy_is_frozen() -> None:
    policy = PayloadPolicy()
    with pytest.raises(AttributeError):
        policy.max_chars = 1  # type: ignore[misc]


def test_policies_with_different_redactors_clean_the_same_keys_each_their_own_way() -> None:
    # Each policy remembers its cleaned keys; one policy's answers never leak into another's.
    hide = PayloadPolicy(redact=lambda text: text.replace("acct-42", "[REDACTED]"))
    keep = PayloadPolicy()
    value = {"acct-42": "x", "note": "acct-42"}
    for _ in range(2):  # the second pass answers keys from each policy's memory
        assert hide.clean(value) == {"[REDACTED]": "x", "note": "[REDACTED]"}
        assert keep.clean(value) == {"acct-42": "x", "note": "acct-42"}
