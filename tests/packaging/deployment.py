"""The deployment files as the tests read them: every document of packaging/kubernetes/ with its
file, a workload's pod spec and containers, and the units of packaging/systemd/."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
KUBERNETES = REPO / "packaging" / "kubernetes"
SYSTEMD = REPO / "packaging" / "systemd"
EXAMPLE_SECRET = KUBERNETES / "examples" / "secret.yaml"
# The oldest Kubernetes the manifests are for (docs/operators.md) and the newest whose schemas
# kubernetes-validate ships.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
WORKLOADS = ("DaemonSet", "Deployment")


@dataclass(frozen=True)
class Document:
    path: Path
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body["kind"])

    def __str__(self) -> str:
        return f"{self.path.relative_to(KUBERNETES)}:{self.kind}/{self.body['metadata']['name']}"


def documents() -> list[Document]:
    """Every YAML document under packaging/kubernetes/, the examples too, in file order."""
    return [
        Document(path, body)
        for path in sorted(KUBERNETES.rglob("*.yaml"))
        for body in yaml.safe_load_all(path.read_text())
        if body is not None
    ]


def of_kind(kind: str) -> list[Document]:
    return [doc for doc in documents() if doc.kind == kind]


def pod_spec(doc: Document) -> dict[str, Any]:
    spec: dict[str, Any] = doc.body["spec"]["template"]["spec"]
    return spec


def containers(doc: Document) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = pod_spec(doc)["containers"]
    return found


def units() -> list[Path]:
    return sorted(SYSTEMD.glob("*.service"))
