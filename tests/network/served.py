"""`sandboxd serve` with its network on, for tests, run inside the fake internet's `uplink` (its
masquerade and forwarding can reach nothing but the fake internet), with what the tests ask of
it: the API and envd's process API (through sandboxd's proxy) called from inside `uplink`, where
serve listens, and `uplink`'s links, addresses, routes and nftables table read back."""

from __future__ import annotations

import base64
import contextlib
import json
import re
import sys
from typing import TYPE_CHECKING, Any

import httpx
from pyroute2 import IPRoute

from sandboxd.runtime.spec import read_record
from tests.network.fake_internet import DNS_ADDRESS
from tests.sandboxd.serving import Sandboxd, kill_sandboxes
from tests.sandboxd.template_cache import ensure_base_template

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from sandboxd.network.slots import NetSlot
    from tests.network.fake_internet import FakeInternet

POOL = "10.11.0.0/16"
ENVD_PORT = "49983"
START = "/process.Process/Start"


class UplinkSandboxd(Sandboxd):
    """A Sandboxd whose serve runs in `net.uplink` (nsenter changes only the network
    namespace: the cgroups, mounts and state directory are the host's, as serve needs): the
    one Sandboxd that may network its sandboxes."""

    in_fake_internet = True

    def __init__(self, net: FakeInternet, state_dir: Path, base_rootfs: Path, *flags: str):
        super().__init__(state_dir, base_rootfs, *flags)
        self.net = net
        self.command = ["nsenter", f"--net={net.uplink.path}", "--", sys.executable, "-m",
                        "sandboxd"]  # fmt: skip

    def _ready(self) -> bool:
        assert self.proc is not None
        assert self.proc.poll() is None, f"sandboxd exited: {self.log.read_text()[-2000:]}"
        try:
            return self.api("GET", "/templates", timeout=1).is_success
        except httpx.TransportError:
            return False

    def api(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A request to serve, made from inside `uplink`."""
        kwargs = {"headers": self.headers, "timeout": 60, **kwargs}
        return self.net.uplink.call(lambda: httpx.request(method, self.url + path, **kwargs))

    def create(self, **body: Any) -> str:
        created = self.api("POST", "/sandboxes", json={"templateID": "base", **body})
        assert created.status_code == 201, created.text
        sandbox_id: str = created.json()["sandboxID"]
        return sandbox_id

    def kill(self, sandbox_id: str) -> None:
        assert self.api("DELETE", f"/sandboxes/{sandbox_id}").status_code == 204

    def slot(self, sandbox_id: str) -> NetSlot:
        spec = read_record(self.box_dir(sandbox_id))
        assert spec is not None
        assert spec.net is not None
        return spec.net

    def run(self, sandbox_id: str, *argv: str) -> tuple[int, str, str]:
        """(exit code, stdout, stderr) of `argv` run by envd in the sandbox (a non-secure one: no
        token), through sandboxd's proxy: a Connect server stream read to its end."""
        body = json.dumps({"process": {"cmd": argv[0], "args": list(argv[1:])}}).encode()
        headers = {"E2b-Sandbox-Id": sandbox_id, "E2b-Sandbox-Port": ENVD_PORT,
                   "Content-Type": "application/connect+json"}  # fmt: skip
        response = self.net.uplink.call(lambda: httpx.post(
            self.url + START, content=b"\0" + len(body).to_bytes(4, "big") + body,
            headers=headers, timeout=60))  # fmt: skip
        assert response.status_code == 200, response.text
        stdout, stderr, exit_code, data = b"", b"", None, response.content
        while data:
            size = int.from_bytes(data[1:5], "big")
            message, data = json.loads(data[5 : 5 + size]), data[5 + size :]
            event = message.get("event", {})
            stdout += base64.b64decode(event.get("data", {}).get("stdout", ""))
            stderr += base64.b64decode(event.get("data", {}).get("stderr", ""))
            if "end" in event:
                exit_code = event["end"].get("exitCode", 0)
        assert exit_code is not None, f"no end event: {response.content!r}"
        return exit_code, stdout.decode(), stderr.decode()

    def clean_up(self) -> None:
        """Stop serve, then kill its sandboxes from inside `uplink`, where their networks are."""
        try:
            self.stop()
        finally:
            self.net.uplink.call(kill_sandboxes, self.state_dir, self.cgroup_parent)


@contextlib.contextmanager
def serving_in_uplink(net: FakeInternet, state_dir: Path, *flags: str) -> Iterator[UplinkSandboxd]:
    """serve with the network pool and the fake internet's DNS, listening on every address of
    `uplink` (the sandboxes' gateways included: only the firewall keeps them from the API);
    stopped, and its sandboxes killed, afterwards."""
    server = UplinkSandboxd(net, state_dir, ensure_base_template(), "--network-pool", POOL,
                            "--dns", DNS_ADDRESS, "--bind", "0.0.0.0", *flags)  # fmt: skip
    try:
        server.start()
        yield server
    finally:
        server.clean_up()


def uplink_network() -> dict[str, Any]:
    """Inside a namespace: its links, addresses and routes by interface name."""
    with IPRoute() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        return {
            "links": sorted(names.values()),
            "addresses": sorted(
                (names[a["index"]], a.get_attr("IFA_ADDRESS")) for a in ipr.get_addr(family=2)
            ),
            "routes": sorted(
                (str(names.get(r.get_attr("RTA_OIF"))), str(r.get_attr("RTA_DST")))
                for r in ipr.get_routes(family=2)
            ),
        }


def nft_table(net: FakeInternet) -> str:
    """`nft list table inet sandboxd` in `uplink`."""
    listed = net.uplink.run(["nft", "list", "table", "inet", "sandboxd"], capture_output=True)
    return listed.stdout.decode()


def serve_s_ports(net: FakeInternet) -> tuple[dict[str, int], int]:
    """The DNS forwarder's own ports by protocol (where the redirects of port 53 go) and the
    domain proxy's (the other port serve offers), from serve's table in `uplink`."""
    table = nft_table(net)
    redirects = re.findall(r"(udp|tcp) dport 53 redirect to :(\d+)", table)
    dns = {proto: int(port) for proto, port in redirects}
    offered = {(proto, int(port)) for proto, port in re.findall(r"(udp|tcp) \. (\d+)", table)}
    (proxy,) = {port for _, port in offered - set(dns.items())}
    return dns, proxy
