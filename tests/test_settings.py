"""Settings: documented in .env.example, read from env and .env, validated, secret-safe."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from jarvismem.errors import ConfigError
from jarvismem.settings import (
    SETTING_GROUPS,
    OncePerMessage,
    Settings,
    load_settings,
    validation_problems,
)

ROOT = Path(__file__).resolve().parents[1]
ENV_EXAMPLE = ROOT / ".env.example"
FIELD_NAMES = sorted(name.upper() for name in Settings.model_fields)

SECRET_KEY = "sk-supersecret0123456789abcdef"
SECRET_LLM_KEY = "llm-topsecret-987654321"
SECRET_PASSWORD = "hunter2-redis-pass"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No setting leaks in from the machine: every field's variable unset, cwd empty."""
    for name in FIELD_NAMES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.chdir(tmp_path)
    yield


def undocumented_fields(env_example: str, names: list[str]) -> list[str]:
    """Names with no ``NAME=`` / ``# NAME=`` line preceded by a comment line."""
    lines = env_example.splitlines()
    missing = []
    for name in names:
        pattern = re.compile(rf"#?\s*{re.escape(name)}=")
        documented = False
        for i, line in enumerate(lines):
            if pattern.match(line) and i > 0:
                above = lines[i - 1]
                # The line above must be prose, not another (commented) assignment.
                if above.startswith("#") and not re.match(r"#\s*[A-Z][A-Z0-9_]*=", above):
                    documented = True
                    break
        if not documented:
            missing.append(name)
    return missing


# --- .env.example -----------------------------------------------------------------------


@pytest.mark.parametrize("name", FIELD_NAMES)
def test_every_field_is_documented_in_env_example(name: str) -> None:
    assert undocumented_fields(ENV_EXAMPLE.read_text(encoding="utf-8"), [name]) == []


def test_documentation_check_reports_a_missing_field() -> None:
    text = "# The namespace.\nJARVISMEM_NAMESPACE=default\n"
    assert undocumented_fields(text, ["JARVISMEM_NAMESPACE", "REDIS_URL"]) == ["REDIS_URL"]


def test_documentation_check_requires_a_comment_above() -> None:
    text = "# ===== Redis =====\n# The URL.\n# REDIS_URL=redis://x\nREDIS_CLUSTER=false\n"
    assert undocumented_fields(text, ["REDIS_URL", "REDIS_CLUSTER"]) == ["REDIS_CLUSTER"]


def test_env_example_values_are_the_defaults() -> None:
    from_example = load_settings(_env_file=str(ENV_EXAMPLE))
    assert from_example.model_dump() == load_settings(_env_file=None).model_dump()


# --- defaults ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("redis_context_ttl_days", 7),
        ("redis_url", None),
        ("redis_cluster", False),
        ("redis_max_connections", 64),
        ("ledger_max_len", 100_000),
        ("storage_backend", "local"),
        ("jarvismem_namespace", "default"),
        ("redaction_enabled", True),
        ("log_level", "INFO"),
        ("athena_url", None),
        ("llm_base_url", None),
        ("redis_ssl_cert_reqs", "required"),
    ],
)
def test_default_value(field: str, expected: object) -> None:
    assert getattr(load_settings(_env_file=None), field) == expected


def test_default_ttl_is_seven_days_in_seconds() -> None:
    assert load_settings(_env_file=None).ttl_seconds == 7 * 86_400


# --- sources -----------------------------------------------------------------------------


def test_environment_variables_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:6390/2")
    monkeypatch.setenv("LEDGER_MAX_LEN", "25")
    monkeypatch.setenv("REDIS_CLUSTER", "true")
    monkeypatch.setenv("STORAGE_BACKEND", "none")
    settings = load_settings(_env_file=None)
    assert settings.redis_url == "redis://127.0.0.1:6390/2"
    assert settings.ledger_max_len == 25
    assert settings.redis_cluster is True
    assert settings.storage_backend == "none"


def test_variable_names_are_case_insensitive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("compaction_every_turns", "9")
    assert load_settings(_env_file=None).compaction_every_turns == 9


def test_dotenv_in_working_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("REDIS_CONTEXT_TTL_DAYS=1.5\nLOG_LEVEL=debug\n")
    settings = load_settings()
    assert settings.redis_context_ttl_days == 1.5
    assert settings.ttl_seconds == 129_600
    assert settings.log_level == "DEBUG"


def test_environment_wins_over_dotenv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=from-dotenv\n")
    monkeypatch.setenv("LLM_MODEL", "from-env")
    assert load_settings().llm_model == "from-env"


def test_env_file_none_ignores_dotenv(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("LLM_MODEL=from-dotenv\n")
    assert load_settings(_env_file=None).llm_model == "gpt-4o-mini"


def test_empty_redis_url_means_embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", "")
    assert load_settings(_env_file=None).redis_url is None


def test_http_urls_lose_their_trailing_slash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATHENA_URL", "http://127.0.0.1:8080/")
    assert load_settings(_env_file=None).athena_url == "http://127.0.0.1:8080"


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"REDIS_URL": "http://x"}, "REDIS_URL"),
        ({"LEDGER_MAX_LEN": "-1"}, "LEDGER_MAX_LEN"),
        ({"STORAGE_BACKEND": "s3"}, "STORAGE_BACKEND"),
        ({"STORAGE_BACKEND": "azure"}, "AZURE_STORAGE_CONNECTION_STRING"),
        ({"LOG_LEVEL": "LOUD"}, "LOG_LEVEL"),
        ({"REDIS_CONTEXT_TTL_DAYS": "0"}, "REDIS_CONTEXT_TTL_DAYS"),
        ({"REDIS_MAX_CONNECTIONS": "many"}, "REDIS_MAX_CONNECTIONS"),
        ({"REDIS_SSL_CERT_REQS": "maybe"}, "REDIS_SSL_CERT_REQS"),
        ({"ATHENA_URL": "ftp://athena"}, "ATHENA_URL"),
        ({"LLM_BASE_URL": "127.0.0.1:11434/v1"}, "LLM_BASE_URL"),
        ({"JARVISMEM_NAMESPACE": "../other-tenant"}, "JARVISMEM_NAMESPACE"),
        ({"ATHENA_TENANT_ID": "a:b"}, "ATHENA_TENANT_ID"),
    ],
)
def test_invalid_value_raises_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert named in str(info.value)


def test_config_error_lists_every_invalid_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_MAX_LEN", "-1")
    monkeypatch.setenv("LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert "LEDGER_MAX_LEN" in str(info.value) and "LOG_LEVEL" in str(info.value)


def test_azure_backend_with_connection_string_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_BACKEND", "azure")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true")
    assert load_settings(_env_file=None).storage_backend == "azure"


# --- secrets -------------------------------------------------------------------------------


@pytest.fixture
def secrets_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATHENA_API_KEY", SECRET_KEY)
    monkeypatch.setenv("ATHENA_JWT_TOKEN", "eyJhbGciOiJIUzI1NiJ9.e30.jwt-secret-part")
    monkeypatch.setenv("LLM_API_KEY", SECRET_LLM_KEY)
    monkeypatch.setenv("REDIS_URL", f"redis://app:{SECRET_PASSWORD}@127.0.0.1:6379/0")
    monkeypatch.setenv("ATHENA_URL", f"https://user:{SECRET_PASSWORD}@athena.example")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", f"AccountKey={SECRET_PASSWORD}")


def _assert_no_secret(text: str) -> None:
    for secret in (SECRET_KEY, SECRET_LLM_KEY, SECRET_PASSWORD, "jwt-secret-part"):
        assert secret not in text


@pytest.mark.usefixtures("secrets_set")
def test_secrets_are_loaded() -> None:
    settings = load_settings(_env_file=None)
    assert settings.athena_api_key is not None
    assert settings.athena_api_key.get_secret_value() == SECRET_KEY
    assert settings.llm_api_key is not None
    assert settings.llm_api_key.get_secret_value() == SECRET_LLM_KEY
    assert settings.redis_url is not None and SECRET_PASSWORD in settings.redis_url


@pytest.mark.usefixtures("secrets_set")
def test_repr_and_str_hide_secrets() -> None:
    settings = load_settings(_env_file=None)
    _assert_no_secret(repr(settings))
    _assert_no_secret(str(settings))


@pytest.mark.usefixtures("secrets_set")
def test_public_dict_hides_secrets_but_shows_they_are_set() -> None:
    public = load_settings(_env_file=None).public_dict()
    _assert_no_secret(repr(public))
    assert public["athena_api_key"] == "[REDACTED]"
    assert public["redis_url"] == "redis://app:[REDACTED]@127.0.0.1:6379/0"


def test_public_dict_shows_unset_secrets_as_none() -> None:
    assert load_settings(_env_file=None).public_dict()["llm_api_key"] is None


@pytest.mark.usefixtures("secrets_set")
def test_config_error_does_not_echo_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEDGER_MAX_LEN", "-1")
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    _assert_no_secret(str(info.value))
    _assert_no_secret(repr(info.value))


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("REDIS_URL", f"http://app:{SECRET_PASSWORD}@127.0.0.1:6379"),
        ("ATHENA_URL", f"ftp://user:{SECRET_PASSWORD}@athena"),
        ("REDIS_CLUSTER", SECRET_PASSWORD),
    ],
)
def test_config_error_does_not_echo_the_rejected_value(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as info:
        load_settings(_env_file=None)
    assert name in str(info.value)
    assert SECRET_PASSWORD not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


# --- validation_problems: the shared message of a ValidationError ------------------------------


class _Pair(BaseModel):
    port: int
    host: str


def _error(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Pair.model_validate(values)
    return caught.value


def test_each_bad_field_is_named_with_its_message_and_not_its_value() -> None:
    text = validation_problems(_error(port="s3cret-not-a-port", host="h"), subject="pair")
    assert text.startswith("port: ")
    assert "s3cret" not in text


def test_problems_are_joined_and_env_names_are_upper_case() -> None:
    text = validation_problems(_error(port="x"), subject="pair", env_names=True)
    assert text.split("; ")[0].startswith("PORT: ")
    assert text.split("; ")[1].startswith("HOST: ")


def test_an_error_about_the_whole_object_names_the_subject() -> None:
    with pytest.raises(ValidationError) as caught:
        _Pair.model_validate("not a mapping")
    assert validation_problems(caught.value, subject="pair").startswith("pair: ")


# --- likely typos are named, not ignored ---------------------------------------------


def _forget_warnings_given() -> None:
    """An earlier test may have given the same warning: start from a clean filter."""
    for f in logging.getLogger("jarvismem.settings").filters:
        if isinstance(f, OncePerMessage):
            f.seen.clear()


def test_a_typo_in_the_env_file_gets_a_did_you_mean_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _forget_warnings_given()
    env = tmp_path / ".env"
    env.write_text(
        "# comment\nREDIS_ULR=redis://127.0.0.1:6379/0\nexport STORAGE_BACKED=local\n"
        "ATHENA_COLOUR=blue\nOPENAI_API_KEY=not-ours\nREDIS_PASSWORD=compose-uses-it\n"
        "JARVISMEM_NAMESPACE=ok\n"
    )
    with caplog.at_level(logging.WARNING, logger="jarvismem.settings"):
        s = load_settings(_env_file=env)
        load_settings(_env_file=env)  # once per process and name, not per load
    assert s.redis_url is None  # the typo still does nothing: it is only named
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        f"{env}: unknown setting REDIS_ULR is ignored: did you mean REDIS_URL?",
        f"{env}: unknown setting STORAGE_BACKED is ignored: did you mean STORAGE_BACKEND?",
        f"{env}: unknown setting ATHENA_COLOUR is ignored: "
        "no such setting (see docs/configuration.md).",
    ]


def test_a_typo_in_the_environment_is_named_only_for_our_prefixes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _forget_warnings_given()
    monkeypatch.setenv("JARVISMEM_NAMESPCE", "x")
    monkeypatch.setenv("REDIS_HOST", "other-programs-variable")
    monkeypatch.setenv("JARVISMEM_REQUIRE_INTEGRATION", "0")
    with caplog.at_level(logging.WARNING, logger="jarvismem.settings"):
        load_settings(_env_file=None)
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "environment: unknown setting JARVISMEM_NAMESPCE is ignored: "
        "did you mean JARVISMEM_NAMESPACE?"
    ]


def test_every_env_example_and_compose_name_is_known_so_copying_the_example_warns_nothing() -> None:
    """A user who uncomments every line of .env.example must not be told they made a typo."""
    from jarvismem.settings import OUR_PREFIXES, unknown_name_warnings

    root = Path(__file__).resolve().parents[1]
    example = (root / ".env.example").read_text()
    names = re.findall(r"^#?\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=", example, flags=re.M)
    names += re.findall(r"\$\{([A-Z][A-Z0-9_]*)", (root / "docker-compose.yml").read_text())
    assert "REDIS_URL" in names and "REDIS_HOST_PORT" in names
    assert unknown_name_warnings(sorted(set(names)), prefixes=OUR_PREFIXES, source=".env") == []


def test_a_validator_message_reaches_the_user_without_pydantic_s_prefix() -> None:
    # The library's ConfigError is what a kernel logs: it must read as one clean line too.
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None, redis_url="http://x")
    assert str(caught.value) == (
        "invalid configuration: REDIS_URL: must start with redis://, rediss://, unix:// or "
        "redis+sentinel://, or be memory://"
    )


# --- high availability: durability level, Sentinel URLs ------------------------------------------


def test_durability_defaults_to_primary() -> None:
    s = load_settings(_env_file=None)
    assert (s.redis_durability, s.redis_wait_replicas, s.redis_wait_timeout_ms) == (
        "primary",
        1,
        1000,
    )


def test_replicated_durability_without_a_server_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="REDIS_DURABILITY=replicated needs a Redis server"):
        load_settings(_env_file=None, redis_durability="replicated")


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"redis_durability": "quorum"}, "REDIS_DURABILITY"),
        ({"redis_wait_replicas": 0}, "REDIS_WAIT_REPLICAS"),
        ({"redis_wait_timeout_ms": 0}, "REDIS_WAIT_TIMEOUT_MS"),
    ],
)
def test_bad_durability_values_name_their_variable(overrides: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        load_settings(_env_file=None, redis_url="redis://127.0.0.1:6379/0", **overrides)


def test_a_wait_timeout_at_or_past_the_tier_timeout_is_refused() -> None:
    # The tier's deadline would cut the WAIT short: the shortfall would never be reported.
    with pytest.raises(ConfigError, match="REDIS_WAIT_TIMEOUT_MS=2000 must be below"):
        load_settings(
            _env_file=None,
            redis_url="redis://127.0.0.1:6379/0",
            redis_durability="replicated",
            redis_wait_timeout_ms=2000,
        )


def test_a_sentinel_url_is_accepted_but_not_with_cluster_mode() -> None:
    url = "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/0"
    assert load_settings(_env_file=None, redis_url=url).redis_url == url
    with pytest.raises(ConfigError, match="REDIS_CLUSTER=true cannot be combined"):
        load_settings(_env_file=None, redis_url=url, redis_cluster=True)


def test_only_marked_records_are_given_once(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("jarvismem.settings")
    with caplog.at_level(logging.WARNING, logger="jarvismem.settings"):
        for _ in range(2):
            logger.warning("said each time")
            logger.warning("said once %s", "only", extra={"once": True})
    assert [r.getMessage() for r in caplog.records] == [
        "said each time",
        "said once only",
        "said each time",
    ]


# --- groups: read-only views over the flat fields --------------------------------------------


def test_every_setting_is_in_exactly_one_group() -> None:
    grouped = [a for names in SETTING_GROUPS.values() for a in names.values()]
    fields = [a for a in grouped if a in Settings.model_fields]
    assert sorted(fields) == sorted(Settings.model_fields)
    assert len(fields) == len(set(fields))
    settings = load_settings(_env_file=None)
    for group, names in SETTING_GROUPS.items():
        view = getattr(settings, group)
        assert dir(view) == sorted(names)
        for name, attribute in names.items():
            assert getattr(view, name) == getattr(settings, attribute), (group, name)


def test_a_group_reads_through_and_cannot_be_written() -> None:
    settings = load_settings(
        _env_file=None, redis_url="redis://u:pw@h:1/0", athena_api_key=SECRET_KEY
    )
    assert settings.redis.url == settings.redis_url == "redis://u:pw@h:1/0"
    assert settings.athena.api_key.get_secret_value() == SECRET_KEY
    settings.llm_model = "other"  # the flat names are the settings: a view follows them
    assert settings.llm.model == "other"
    with pytest.raises(AttributeError, match="read-only"):
        settings.redis.url = "redis://elsewhere"
    with pytest.raises(AttributeError, match="has no 'adress'"):
        _ = settings.redis.adress
    shown = repr(settings.redis) + repr(settings.athena)
    assert "pw" not in shown and SECRET_KEY not in shown
    assert settings.redis.env_names()[0] == "REDIS_URL"
