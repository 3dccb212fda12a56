"""packaging/kubernetes/ against Kubernetes' own schemas (kubernetes-validate, offline, strict:
an unknown field fails) for the oldest and newest versions the manifests are for, and what the
schemas cannot see: selectors that select, probes on declared ports, Secret keys that exist, the
NetworkPolicy on the ports the nodes listen on."""

from __future__ import annotations

import copy

import kubernetes_validate
import pytest

from tests.packaging.deployment import (
    EXAMPLE_SECRET,
    KUBERNETES_VERSIONS,
    WORKLOADS,
    Document,
    containers,
    documents,
    of_kind,
    pod_spec,
)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("doc", documents(), ids=str)
def test_document_validates_against_the_schema(doc: Document, version: str) -> None:
    kubernetes_validate.validate(doc.body, version, strict=True)


def test_a_mistyped_field_fails_validation() -> None:
    (node,) = of_kind("DaemonSet")
    body = copy.deepcopy(node.body)
    body["spec"]["template"]["spec"]["hostNetwrk"] = True
    with pytest.raises(kubernetes_validate.ValidationError, match="hostNetwrk"):
        kubernetes_validate.validate(body, KUBERNETES_VERSIONS[0], strict=True)


def test_everything_is_in_the_namespace_the_manifests_make() -> None:
    (namespace,) = of_kind("Namespace")
    assert namespace.path.name.startswith("00-"), "kubectl apply -f DIR goes in file order"
    for doc in documents():
        if doc.kind != "Namespace":
            assert doc.body["metadata"]["namespace"] == namespace.body["metadata"]["name"], doc


@pytest.mark.parametrize("doc", [d for d in documents() if d.kind in WORKLOADS], ids=str)
def test_workload_selects_its_pods_and_probes_declared_ports(doc: Document) -> None:
    labels = doc.body["spec"]["template"]["metadata"]["labels"]
    assert doc.body["spec"]["selector"]["matchLabels"].items() <= labels.items()
    for container in containers(doc):
        declared = {port["name"] for port in container["ports"]}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in container:
                handler = container[probe].get("httpGet") or container[probe]["tcpSocket"]
                assert handler["port"] in declared, (doc, probe)


def test_every_secret_reference_names_a_key_of_the_secret() -> None:
    (secret,) = of_kind("Secret")
    assert secret.path == EXAMPLE_SECRET
    name, keys = secret.body["metadata"]["name"], set(secret.body["stringData"])
    for doc in (d for d in documents() if d.kind in WORKLOADS):
        for container in containers(doc):
            for env in container.get("env", []):
                if ref := env.get("valueFrom", {}).get("secretKeyRef"):
                    assert (ref["name"], ref["key"]) in {(name, key) for key in keys}, doc
        for volume in pod_spec(doc).get("volumes", []):
            if "secret" in volume:
                assert volume["secret"]["secretName"] == name
                assert {item["key"] for item in volume["secret"].get("items", [])} <= keys


def _listen_ports(args: list[str]) -> set[int]:
    return {int(args[i + 1].rsplit(":", 1)[1]) for i, arg in enumerate(args[:-1])
            if arg in ("--listen", "--proxy-listen")}  # fmt: skip


def _tcp_ports(rule: dict[str, object]) -> set[int]:
    ports = rule["ports"]
    assert isinstance(ports, list)
    return {n for p in ports if p["protocol"] == "TCP"
            for n in range(p["port"], p.get("endPort", p["port"]) + 1)}  # fmt: skip


def test_network_policy_keeps_the_node_ports_for_gateways_and_nothing_else() -> None:
    (node,) = of_kind("DaemonSet")
    (gateway,) = of_kind("Deployment")
    (policy,) = of_kind("NetworkPolicy")
    (agent,) = containers(node)
    node_ports = _listen_ports(agent["args"])
    assert node_ports == {port["containerPort"] for port in agent["ports"]}
    assert policy.body["spec"]["podSelector"] == node.body["spec"]["selector"]
    gateways_only, everyone = policy.body["spec"]["ingress"]
    assert gateways_only["from"] == [{"podSelector": gateway.body["spec"]["selector"]}]
    assert _tcp_ports(gateways_only) == node_ports
    assert "from" not in everyone
    assert _tcp_ports(everyone) == set(range(1, 65536)) - node_ports
    assert {p["protocol"] for p in everyone["ports"] if "port" not in p} == {"UDP", "SCTP"}
