"""docker-compose.yml, checked by reading it (these machines have no Docker engine).

The file is the contract for users who run the backends in containers: loopback-only
ports, no credential in the file, Redis durable (AOF, fsync always, as docs/reliability.md
promises), every variable documented, images pinned, health checks that use only what
the images ship.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
DEPLOYMENT = ROOT / "docs" / "deployment.md"
RELIABILITY = ROOT / "docs" / "reliability.md"
SERVICES_SCRIPT = ROOT / "scripts" / "services"

ATHENA_SERVICES = ("athena", "mongodb", "milvus", "etcd", "minio", "arangodb")
ALWAYS_ON = ("redis", "azurite")
REQUIRED_ATHENA_SECRETS = (
    "MONGO_ROOT_USERNAME",
    "MONGO_ROOT_PASSWORD",
    "MINIO_ROOT_USER",
    "MINIO_ROOT_PASSWORD",
    "ARANGO_ROOT_PASSWORD",
)

# One token of Compose interpolation: an escaped "$$", a braced "${...}" or a bare "$NAME".
_TOKEN_RE = re.compile(
    r"\$\$|\$\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?P<modifier>[^}]*)\}|\$(?P<bare>[A-Za-z_][A-Za-z0-9_]*)"
)
_SECRET_NAME_RE = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY\b|API_KEY|ACCESS_KEY|USER", re.I)
_URL_CREDENTIALS_RE = re.compile(r"://([^/@\s]*)@")


def _compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


def _environment(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict, whichever of the two YAML forms it uses."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = (item.split("=", 1) if "=" in item else (item, "") for item in env)
        return {name: value for name, value in pairs}
    return {str(name): "" if value is None else str(value) for name, value in env.items()}


def _strings(node: Any) -> list[str]:
    """Every string anywhere in a YAML tree (keys and values)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for item in node for s in _strings(item)]
    return []


def _variables(text: str) -> list[tuple[str, str]]:
    """``(name, modifier)`` of every interpolation in ``text`` (``$$`` escapes skipped)."""
    found = []
    for match in _TOKEN_RE.finditer(text):
        if match.group(0) == "$$":
            continue
        name = match.group("braced") or match.group("bare")
        found.append((name, match.group("modifier") or ""))
    return found


def _without_interpolations(text: str) -> str:
    return _TOKEN_RE.sub(lambda m: "$" if m.group(0) == "$$" else "", text)


def _documented_names() -> set[str]:
    text = ENV_EXAMPLE.read_text(encoding="utf-8")
    return set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", text, flags=re.M))


def _published_ports() -> list[tuple[str, Any]]:
    return [(name, port) for name, svc in _services().items() for port in svc.get("ports") or []]


def test_compose_file_parses_as_yaml_with_services() -> None:
    assert set(ALWAYS_ON + ATHENA_SERVICES) <= set(_services())


def test_variable_scanner_skips_escaped_dollars() -> None:
    # Guards the helper the other tests rely on.
    assert _variables('$$HOME ${A:-x} $B "$$(printenv C)"') == [("A", ":-x"), ("B", "")]


@pytest.mark.parametrize(("service", "port"), _published_ports())
def test_every_published_port_binds_loopback(service: str, port: Any) -> None:
    if isinstance(port, dict):
        assert port.get("host_ip") == "127.0.0.1", f"{service}: {port}"
    else:
        parts = str(port).split(":")
        assert len(parts) == 3 and parts[0] == "127.0.0.1", f"{service}: {port!r}"


def test_redis_host_port_is_not_6379_and_can_be_overridden() -> None:
    # 127.0.0.1:6379 is where a locally installed redis-server (and scripts/services)
    # listens: publishing there makes `docker compose up` fail on such a machine.
    (port,) = _services()["redis"]["ports"]
    assert isinstance(port, dict), "long syntax: the host port is a variable"
    assert port["target"] == 6379
    assert _variables(str(port["published"])) == [("REDIS_HOST_PORT", ":-6380")]


def test_env_example_and_deployment_doc_point_at_the_compose_redis_port() -> None:
    env_example = ENV_EXAMPLE.read_text(encoding="utf-8")
    assert re.search(r"^# REDIS_HOST_PORT=6380$", env_example, flags=re.M)
    assert "REDIS_URL=redis://127.0.0.1:6380/0" in env_example
    deployment = DEPLOYMENT.read_text(encoding="utf-8")  # where the compose setup is told
    assert "REDIS_URL=redis://127.0.0.1:6380/0" in deployment
    assert "REDIS_HOST_PORT" in deployment


def test_every_variable_used_is_documented_in_env_example() -> None:
    used = {name for text in _strings(_compose()) for name, _ in _variables(text)}
    assert used, "the compose file is expected to read its settings from .env"
    missing = used - _documented_names()
    assert not missing, f"undocumented compose variables: {sorted(missing)}"


def test_no_variable_is_required_at_interpolation_time() -> None:
    # Compose interpolates every service before filtering by profile, so a
    # ${VAR:?...} anywhere would make a plain `docker compose up` fail.
    required = [
        (name, mod)
        for text in _strings(_compose())
        for name, mod in _variables(text)
        if mod.startswith(("?", ":?"))
    ]
    assert not required


@pytest.mark.parametrize("secret", REQUIRED_ATHENA_SECRETS)
def test_athena_preflight_refuses_to_start_without_each_secret(secret: str) -> None:
    preflight = _services()["athena-preflight"]
    assert preflight.get("profiles") == ["athena"]
    assert _environment(preflight).get(secret) == f"${{{secret}:-}}"
    script = " ".join(preflight["command"])
    assert re.search(rf"for name in [A-Z_ ]*\b{secret}\b", script)
    assert "exit 1" in script


@pytest.mark.parametrize("service", [*ALWAYS_ON, *ATHENA_SERVICES])
def test_secret_environment_values_come_only_from_variables(service: str) -> None:
    for name, value in _environment(_services()[service]).items():
        literal = _without_interpolations(value)
        if _SECRET_NAME_RE.search(name) and name != "ARANGO_USER":
            assert literal == "", f"{service}.{name} has a literal value"
        for userinfo in _URL_CREDENTIALS_RE.findall(literal):
            assert userinfo in ("", ":"), f"{service}.{name} has credentials in a URL"


def test_no_known_default_credential_appears_anywhere() -> None:
    text = COMPOSE_FILE.read_text(encoding="utf-8").lower()
    for default in ("minioadmin", "password123", "changeme", "devstoreaccount1", "accountkey="):
        assert default not in text


def test_redis_runs_with_aof_fsync_always() -> None:
    # docs/reliability.md: acknowledged turns survive a Redis crash only with
    # `appendfsync always`; the compose Redis is the one docs/deployment.md points users to.
    command = " ".join(_services()["redis"]["command"])
    assert "--appendonly yes" in command
    assert "--appendfsync always" in command


def test_reliability_doc_names_the_fsync_policy_compose_runs() -> None:
    command = " ".join(_services()["redis"]["command"])
    policy = re.search(r"--appendfsync (\w+)", command)
    assert policy is not None
    doc = RELIABILITY.read_text(encoding="utf-8")
    assert f"`docker-compose.yml` runs Redis with AOF `appendfsync {policy.group(1)}`" in doc


def test_redis_keeps_its_data_in_a_volume() -> None:
    redis = _services()["redis"]
    assert any(str(v).endswith(":/data") for v in redis["volumes"])
    assert "--dir /data" in " ".join(redis["command"])


def test_redis_has_a_ping_healthcheck() -> None:
    check = " ".join(_services()["redis"]["healthcheck"]["test"])
    assert "redis-cli ping" in check


def test_redis_password_is_optional() -> None:
    env = _environment(_services()["redis"])
    assert env["REDIS_PASSWORD"] == "${REDIS_PASSWORD:-}"


def test_azurite_runs_only_the_blob_service() -> None:
    azurite = _services()["azurite"]
    assert azurite["image"].startswith("mcr.microsoft.com/azure-storage/azurite")
    assert azurite["command"][:3] == ["azurite-blob", "--blobHost", "0.0.0.0"]
    assert "healthcheck" in azurite


def test_azurite_skips_the_api_version_check() -> None:
    # Without it, an Azure SDK newer than the emulator is refused with
    # "The API version ... is not supported".
    assert "--skipApiVersionCheck" in _services()["azurite"]["command"]


def test_azurite_image_is_pinned_to_the_version_the_tests_install() -> None:
    image = _services()["azurite"]["image"]
    name, _, tag = image.rpartition(":")
    assert name == "mcr.microsoft.com/azure-storage/azurite"
    assert re.fullmatch(r"\d+\.\d+\.\d+", tag), f"azurite image not pinned: {image}"
    script = SERVICES_SCRIPT.read_text(encoding="utf-8")
    assert f"azurite@{tag}" in script, "scripts/services installs another Azurite version"


@pytest.mark.parametrize("service", sorted(set(ALWAYS_ON + ATHENA_SERVICES) - {"athena"}))
def test_every_third_party_image_is_pinned(service: str) -> None:
    image = _services()[service]["image"]
    tag = image.rpartition(":")[2] if ":" in image.rsplit("/", 1)[-1] else ""
    assert tag and tag != "latest", f"{service}: image {image!r} has no version tag"


# Images known to ship no curl (a health check calling it would never pass).
_NO_CURL = ("minio", "azurite")


@pytest.mark.parametrize("service", _NO_CURL)
def test_healthchecks_use_only_what_the_image_ships(service: str) -> None:
    check = " ".join(str(part) for part in _services()[service]["healthcheck"]["test"])
    assert "curl" not in check


def test_minio_health_check_uses_its_own_client() -> None:
    assert _services()["minio"]["healthcheck"]["test"] == ["CMD", "mc", "ready", "local"]


@pytest.mark.parametrize("service", ATHENA_SERVICES)
def test_athena_services_are_under_the_athena_profile(service: str) -> None:
    assert _services()[service].get("profiles") == ["athena"]


@pytest.mark.parametrize("service", ALWAYS_ON)
def test_core_services_have_no_profile(service: str) -> None:
    assert "profiles" not in _services()[service]


def test_athena_image_is_configurable_with_a_default() -> None:
    image = _services()["athena"]["image"]
    assert _variables(image) and _variables(image)[0][0] == "ATHENA_IMAGE"
    assert _variables(image)[0][1].startswith(":-") and len(_variables(image)[0][1]) > 2


def test_athena_serves_on_loopback_8080() -> None:
    assert "127.0.0.1:8080:8080" in _services()["athena"]["ports"]


@pytest.mark.parametrize(
    ("service", "variables"),
    [
        ("mongodb", {"MONGO_ROOT_USERNAME", "MONGO_ROOT_PASSWORD"}),
        ("minio", {"MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD"}),
        ("arangodb", {"ARANGO_ROOT_PASSWORD"}),
    ],
)
def test_datastore_credentials_come_from_env(service: str, variables: set[str]) -> None:
    env = _environment(_services()[service])
    used = {name for value in env.values() for name, _ in _variables(value)}
    assert variables <= used


def test_every_service_with_dependents_has_a_healthcheck() -> None:
    services = _services()
    for name, svc in services.items():
        for dep, spec in (svc.get("depends_on") or {}).items():
            if spec.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits on {dep} without a check"


def _compose_redis_port() -> int:
    """The host port compose publishes Redis on when REDIS_HOST_PORT is unset."""
    (port,) = _services()["redis"]["ports"]
    ((_name, modifier),) = _variables(str(port["published"]))
    return int(modifier.removeprefix(":-"))


def test_init_advises_docker_compose_for_the_port_compose_publishes() -> None:
    # `jarvismem init` suggests `docker compose up -d redis` only for a REDIS_URL that
    # the compose Redis answers on; anything else would end in "connection refused".
    from jarvismem.cli import setup
    from jarvismem.cli.setup import next_steps

    port = _compose_redis_port()
    steps, _ = next_steps({"REDIS_URL": f"redis://127.0.0.1:{port}/0"}, ".env")
    assert any(step.startswith("docker compose up -d redis") for step in steps)
    other, notes = next_steps({"REDIS_URL": "redis://127.0.0.1:6379/0"}, ".env")
    assert not any("docker compose" in step for step in other)
    assert any(f"redis://127.0.0.1:{port}/0" in note for note in notes)
    assert f"Redis on {port}" in " ".join((next_steps.__doc__ or "").split())
    assert setup.COMPOSE_REDIS_PORT == port
