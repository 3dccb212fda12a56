"""Every command line the deployment runs, read by the parser of the sandboxd it deploys
(sandboxd/cli.py): the node's and the gateway's containers in packaging/kubernetes/, the Exec
lines of packaging/systemd/. Each is expanded as its engine would expand it (Kubernetes'
$(VAR), the shell's $VAR, systemd's ${VAR} and %H) with the values the engine would have (the
example Secret's, a node's name and address), its environment set as the engine sets it, and
the files it names made where the pod mounts them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandboxd.cli import _parser
from tests.packaging.deployment import EXAMPLE_SECRET, WORKLOADS, containers, documents, units

NODE_NAME = "node-1"
# What the Downward API gives the node's pod.
FIELDS = {"spec.nodeName": NODE_NAME, "status.hostIP": "10.1.2.3"}
SECRET: dict[str, str] = yaml.safe_load(EXAMPLE_SECRET.read_text())["stringData"]
# /etc/sandboxd/cluster.env, as the units' comments describe it.
CLUSTER_ENV = {
    "SANDBOXD_CLUSTER_TOKEN": SECRET["cluster-token"],
    "SANDBOXD_DATABASE_URL": SECRET["database-url"],
    "PGPASSWORD": SECRET["database-password"],
}
SHELL_SEPARATORS = {";", "&&", "||", "|", "&"}
SHELL_KEYWORDS = {"exec", "until", "while", "if", "then", "do", "done", "fi", "!"}


@dataclass
class CommandLine:
    source: str
    argv: list[str]
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # path in the pod: its content


def _expand(text: str, values: dict[str, str], pattern: str = r"\$\{?(\w+)\}?") -> str:
    """Every variable in `text` replaced; a variable with no value fails (a misspelt name)."""
    return re.sub(pattern, lambda match: values[match[1]], text)


def _shell_commands(script: str, values: dict[str, str]) -> list[list[str]]:
    """The simple commands of a shell script that run sandboxd, their words expanded."""
    lexer = shlex.shlex(_expand(script, values), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in SHELL_SEPARATORS:
            commands.append([])
        elif commands[-1] or token not in SHELL_KEYWORDS:
            commands[-1].append(token)
    return [words for words in commands if words and Path(words[0]).name == "sandboxd"]


def _invocations(argv: list[str], values: dict[str, str]) -> list[list[str]]:
    """sandboxd's argv in `argv`: itself, or what a `sh -c SCRIPT NAME ARGS...` runs."""
    if Path(argv[0]).name == "sh" and argv[1] == "-c":
        positional = {str(n): arg for n, arg in enumerate(argv[3:])}
        return _shell_commands(argv[2], values | positional)
    return [argv]


def _container_env(container: dict[str, Any]) -> dict[str, str]:
    env = {}
    for var in container.get("env", []):
        source = var.get("valueFrom", {})
        if "fieldRef" in source:
            env[var["name"]] = FIELDS[source["fieldRef"]["fieldPath"]]
        else:
            env[var["name"]] = var.get("value") or SECRET[source["secretKeyRef"]["key"]]
    return env


def _mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
    secrets = {v["name"]: v["secret"] for v in pod.get("volumes", []) if "secret" in v}
    files: dict[str, str] = {}
    for mount in container.get("volumeMounts", []):
        if secret := secrets.get(mount["name"]):
            items = secret.get("items") or [{"key": k, "path": k} for k in SECRET]
            files |= {f"{mount['mountPath']}/{i['path']}": SECRET[i["key"]] for i in items}
    return files


def _kubernetes_lines() -> list[CommandLine]:
    lines: list[CommandLine] = []
    for doc in (d for d in documents() if d.kind in WORKLOADS):
        pod = doc.body["spec"]["template"]["spec"]
        for container in containers(doc):
            env, files = _container_env(container), _mounted_files(pod, container)
            main = [
                _expand(arg, env, r"\$\((\w+)\)")
                for arg in container["command"] + container["args"]
            ]
            hooks = {
                name: hook["exec"]["command"]
                for name, hook in container.get("lifecycle", {}).items()
            }
            for name, argv in ({container["name"]: main} | hooks).items():
                lines.extend(
                    CommandLine(f"{doc.path.name}:{name}", found, env, files)
                    for found in _invocations(argv, env)
                )
    return lines


def _unit_lines() -> list[CommandLine]:
    lines: list[CommandLine] = []
    for unit in units():
        for line in unit.read_text().splitlines():
            if match := re.match(r"(Exec\w+)=[-@+!:]*(.*)", line):
                argv = shlex.split(match[2].replace("%H", NODE_NAME))
                for found in _invocations(argv, CLUSTER_ENV):
                    words = [_expand(word, CLUSTER_ENV) for word in found]
                    lines.append(CommandLine(f"{unit.name}:{match[1]}", words, CLUSTER_ENV))
    return lines


COMMAND_LINES = _kubernetes_lines() + _unit_lines()


def test_each_role_is_found() -> None:
    found = sorted((line.source, " ".join(line.argv[1:3])) for line in COMMAND_LINES)
    assert [(source, words.split()[0]) for source, words in found] == [
        ("10-node.yaml:node", "node"),
        ("20-gateway.yaml:gateway", "gateway"),
        ("sandboxd-gateway.service:ExecStart", "gateway"),
        ("sandboxd-node.service:ExecStart", "node"),
    ]


@pytest.mark.parametrize("line", COMMAND_LINES, ids=lambda line: line.source)
def test_command_line_parses(
    line: CommandLine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = line.argv
    for path, content in line.files.items():
        local = tmp_path / path.lstrip("/")
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(content)
        argv = [arg.replace(path, str(local)) for arg in argv]
    for name, value in line.env.items():
        monkeypatch.setenv(name, value)
    assert Path(argv[0]).name == "sandboxd"
    try:
        args = _parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"sandboxd's parser refuses {shlex.join(argv)}")
    assert args.command == argv[1]
