"""docker-compose.secure.yml stays in step with ``segcoord kafka start --secure`` (docs/security.md, "Docker").

No Docker engine runs here, so the files are checked as data: the override's node settings, read the way
the ``apache/kafka`` image reads ``KAFKA_*`` variables, must agree with :func:`streaming.local_sasl.broker_props`
(with ``SASL_SSL`` for ``SASL_PLAINTEXT`` on the client listener), every segcoord service must take its role's
credentials from a secret file, and every command must parse with the real CLI.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import yaml  # PyYAML: a test dependency (pyproject [test]); missing, this file fails rather than skips

from streaming import kafka_roles, local_sasl
from streaming.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
NODE_SCRIPT = ROOT / "docker" / "kafka-secure-node.sh"


def load(name: str) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / name).read_text())
    assert isinstance(data, dict)
    return data


def kafka_property(env_name: str) -> str:
    """The server property an ``apache/kafka`` image variable sets: ``___`` is ``-``, ``__`` ``_``, ``_`` ``.``."""
    body = env_name.removeprefix("KAFKA_").lower()
    return body.replace("___", "\0").replace("__", "\1").replace("_", ".").replace("\0", "-").replace("\1", "_")


def node_properties(base: dict[str, Any], override: dict[str, Any], node: str) -> dict[str, str]:
    """A node's ``KAFKA_*`` settings after compose merges the override's environment over the base's."""
    env = {**base["services"][node]["environment"], **override["services"][node]["environment"]}
    return {kafka_property(k): str(v) for k, v in env.items() if k.startswith("KAFKA_")}


def reference(tmp_path: Path) -> dict[str, str]:
    local_sasl.ensure_credentials(tmp_path)
    return local_sasl.broker_props(tmp_path, 9092, 9093)


def nodes(base: dict[str, Any]) -> list[str]:
    return [name for name, svc in base["services"].items() if str(svc.get("image", "")).startswith("apache/kafka")]


def test_the_image_variable_names_map_to_the_properties() -> None:
    assert kafka_property("KAFKA_SUPER_USERS") == "super.users"
    assert (kafka_property("KAFKA_LISTENER_NAME_SASL__SSL_SCRAM___SHA___512_SASL_JAAS_CONFIG")
            == "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config")


def test_each_secure_node_has_the_settings_of_the_local_secure_broker(tmp_path: Path) -> None:
    base, override = load("docker-compose.yml"), load("docker-compose.secure.yml")
    ref = reference(tmp_path)
    assert nodes(base) == ["kafka-1", "kafka-2", "kafka-3"]
    for node in nodes(base):
        props = node_properties(base, override, node)
        for key in ("authorizer.class.name", "sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
                    "super.users", "allow.everyone.if.no.acl.found", "sasl.mechanism.controller.protocol",
                    "listener.name.controller.sasl.enabled.mechanisms"):
            assert props[key] == ref[key], (node, key)
        assert (props["listener.name.sasl_ssl.sasl.enabled.mechanisms"]
                == ref["listener.name.sasl_plaintext.sasl.enabled.mechanisms"])
        assert props["super.users"] == ";".join(f"User:{p}" for p in local_sasl.SUPER)
        # the client listener is TLS (its clients are not on loopback); the controller's as locally
        assert props["inter.broker.listener.name"] == "SASL_SSL"
        assert [x.split("://")[0] for x in props["listeners"].split(",")] == ["SASL_SSL", "CONTROLLER"]
        assert props["advertised.listeners"] == f"SASL_SSL://{node}:9092"
        mapping = dict(x.split(":") for x in props["listener.security.protocol.map"].split(","))
        ref_mapping = dict(x.split(":") for x in ref["listener.security.protocol.map"].split(","))
        assert mapping == {"CONTROLLER": ref_mapping["CONTROLLER"], "SASL_SSL": "SASL_SSL"}
        assert props["controller.listener.names"] == "CONTROLLER"
        assert not any("password" in k or "jaas" in k for k in props), "secrets belong in files, not the YAML"
        svc = override["services"][node]
        assert set(svc["secrets"]) == {"kafka-admin-password", "kafka-controller-password"}
        assert "/opt/segcoord/kafka-secure-node.sh" in svc["entrypoint"][-1]
        assert any(v.endswith(":/opt/segcoord/kafka-secure-node.sh:ro") for v in svc["volumes"])
        assert "--command-config" in svc["healthcheck"]["test"][-1]


def test_the_node_script_sets_the_jaas_settings_of_broker_props(tmp_path: Path) -> None:
    ref = reference(tmp_path)
    script = NODE_SCRIPT.read_text()
    exported = {kafka_property(line.split("=", 1)[0].removeprefix("export "))
                for line in script.splitlines() if line.startswith("export KAFKA_")}
    jaas = {k.replace("sasl_plaintext", "sasl_ssl") for k in ref if k.endswith("jaas.config")}
    assert exported == jaas
    for key in jaas:  # the same login modules and users as the local broker's (its passwords differ)
        module, user = ref[key.replace("sasl_ssl", "sasl_plaintext")].split(" required ")[0], "admin"
        assert {"scram": "$scram", "plain": "$plain"}[module.split(".")[-2]] in script
        assert module in script
        assert f'username=\\"{user if "scram" in key else "controller"}\\"' in script
    assert f"--add-scram \"{local_sasl.MECHANISM}=[name=admin,password=$admin]\"" in script


def segcoord_commands(svc: dict[str, Any]) -> list[list[str]]:
    command = svc["command"]
    assert command[:2] == ["sh", "-c"]
    out = []
    for part in command[2].split("&&"):
        argv = shlex.split(part.replace("$$SEGCOORD_BOOTSTRAP", "kafka-1:9092"))
        assert argv[0] == "segcoord"
        out.append(argv[1:])
    return out


def test_each_segcoord_service_takes_its_roles_credentials_from_a_secret() -> None:
    override = load("docker-compose.secure.yml")
    secrets = override["secrets"]
    roles = {r.name for r in local_sasl.ROLES}
    services = {n: s for n, s in override["services"].items() if not n.startswith("kafka-") or n == "kafka-setup"}
    assert set(services) >= {"kafka-setup", "coordinator", "historical-1"}
    for name, svc in services.items():
        config = svc["environment"]["SEGCOORD_KAFKA_CONFIG"]
        assert config.startswith("/run/secrets/")
        secret = config.removeprefix("/run/secrets/")
        assert secret in svc["secrets"] and "kafka-ca" in svc["secrets"]
        principal = Path(secrets[secret]["file"]).name.removesuffix(".properties")
        assert principal in roles | {"admin"}, name
        assert principal == ("admin" if name == "kafka-setup" else name.split("-")[0]), name
        assert not any("PASSWORD" in k or "USERNAME" in k for k in svc["environment"]), name
        parser = build_parser()
        for argv in segcoord_commands(svc):
            assert not any("pass" in a.lower() or "sasl" in a.lower() for a in argv), (name, argv)
            parser.parse_args(argv)  # exits (SystemExit) on an option the CLI does not have
    setup = segcoord_commands(override["services"]["kafka-setup"])
    assert setup[-1][:2] == ["kafka", "setup-roles"]
    args = build_parser().parse_args(setup[-1])
    assert args.credentials_dir == "/credentials" and args.ca == "/run/secrets/kafka-ca"
    assert "./secrets/kafka:/credentials:ro" in override["services"]["kafka-setup"]["volumes"]
    for principal in ("admin", "controller"):
        assert secrets[f"kafka-{principal}-password"]["file"] == f"./secrets/kafka/{principal}.password"
    assert set(kafka_roles.PRINCIPALS) >= {"admin", "controller"} | roles
