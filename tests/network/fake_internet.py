"""The fake internet (docs/testing.md, "Network tests"): a namespace `uplink` whose only way
out is a veth to a namespace `internet`, which holds HTTP, HTTPS and DNS servers on
documentation addresses.

Nothing is made in the host's namespace: both veth ends are created inside the harness's own
namespaces, and every sysctl is set from a thread that has entered one (and checked it did).
Deleting the two namespaces removes every link, address and route the harness made.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import trustme

from tests.network.isolation import Sealed, check_sealed
from tests.network.namespaces import NetworkNamespace
from tests.network.package_index import make_index
from tests.waiting import wait_until

if TYPE_CHECKING:
    from collections.abc import Iterator
    from subprocess import Popen

# Documentation ranges (RFC 5737): nothing real answers there even if a packet escaped.
UPLINK_ADDRESS = "203.0.113.1"
INTERNET_ADDRESS = "203.0.113.2"
LINK_PREFIX = 24
DNS_ADDRESS = "198.51.100.53"
NAMES = {
    "example.test": "198.51.100.10",
    "a.example.test": "198.51.100.11",
    "other.test": "198.51.100.12",
}
# The SOCKS5 server (socks_server.py): port 1080, these credentials.
SOCKS_ADDRESS = "198.51.100.30"
SOCKS_USER, SOCKS_PASSWORD = "sandbox", "secret"
# The package index (package_index.py) has a name and an address of its own.
INDEX_NAME = "pypi.test"
INDEX_ADDRESS = "198.51.100.20"
# The links live only inside the harness's namespaces, so their names need not be unique.
UPLINK_LINK = "uplink0"
INTERNET_LINK = "internet0"

UPLINK_SEALED = Sealed(
    links=frozenset({"lo", UPLINK_LINK}),
    routes=frozenset({("default", INTERNET_ADDRESS, UPLINK_LINK)}),
)
INTERNET_SEALED = Sealed(links=frozenset({"lo", INTERNET_LINK}), routes=frozenset())

_runs = itertools.count(1)


class FakeInternet:
    """The two namespaces, their link, the servers and the CA their certificate is signed by.

    `uplink` is where the code under test runs (later `sandboxd serve`): `uplink.call(fn)` runs
    a callable there, `uplink.popen(argv)` a process. `names` maps each test name to the
    address its servers answer on; DNS at `DNS_ADDRESS` resolves them, and `INDEX_NAME`, and
    the names of `dns_only` (to addresses the harness does not hold, e.g. `uplink`'s own).
    """

    def __init__(
        self, names: dict[str, str] | None = None, dns_only: dict[str, str] | None = None
    ) -> None:
        # Unique per process and per harness: parallel runs and tests never share a name.
        self.prefix = f"fakenet-{os.getpid()}-{next(_runs)}"
        self.names = dict(NAMES if names is None else names)
        self.dns_only = dict(dns_only or {})
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.ca_pem = self.workdir / "ca.pem"
        self.server_log = self.workdir / "servers.log"
        self.socks_log = self.workdir / "socks.log"  # one JSON line per CONNECT asked for
        self._uplink: NetworkNamespace | None = None
        self._internet: NetworkNamespace | None = None
        self.servers: Popen[bytes] | None = None

    @property
    def uplink(self) -> NetworkNamespace:
        """Where the code under test runs: its only way out is the veth to `internet`."""
        if self._uplink is None:
            raise RuntimeError("the fake internet is not built")
        return self._uplink

    @property
    def internet(self) -> NetworkNamespace:
        """Where the servers run."""
        if self._internet is None:
            raise RuntimeError("the fake internet is not built")
        return self._internet

    def build(self) -> None:
        """Make both namespaces, the veth between them, their addresses and the default route
        of `uplink`."""
        self._uplink = uplink = NetworkNamespace(f"{self.prefix}-uplink")
        self._internet = internet = NetworkNamespace(f"{self.prefix}-internet")
        # Forwarding inside `internet` makes it answer a packet for an address it does not hold
        # with ICMP "unreachable" (without forwarding the kernel drops it silently and a
        # connection hangs). It can only forward back to `uplink`: it has no other link.
        # icmp_ratelimit 0 lifts one limit on those answers; the kernel's route-error limiter
        # still allows a burst of 5 and then one a second, which only delays a SYN's retry.
        internet.call(set_sysctls, {"net/ipv4/ip_forward": "1", "net/ipv4/icmp_ratelimit": "0"})
        with uplink.ipr() as ipr:
            ipr.link("add", ifname=UPLINK_LINK, kind="veth",
                     peer={"ifname": INTERNET_LINK, "net_ns_fd": internet.name})  # fmt: skip
            veth = ipr.link_lookup(ifname=UPLINK_LINK)[0]
            ipr.addr("add", index=veth, address=UPLINK_ADDRESS, prefixlen=LINK_PREFIX)
            ipr.link("set", index=veth, state="up")
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
        with internet.ipr() as ipr:
            veth = ipr.link_lookup(ifname=INTERNET_LINK)[0]
            ipr.addr("add", index=veth, address=INTERNET_ADDRESS, prefixlen=LINK_PREFIX)
            ipr.link("set", index=veth, state="up")
            lo = ipr.link_lookup(ifname="lo")[0]
            # The servers' addresses are local to `internet`: reached through its veth end
            # from `uplink`, with no further link that could carry a packet anywhere.
            for address in {*self.names.values(), DNS_ADDRESS, INDEX_ADDRESS, SOCKS_ADDRESS}:
                ipr.addr("add", index=lo, address=address, prefixlen=32)
            ipr.link("set", index=lo, state="up")
        with uplink.ipr() as ipr:
            # The veth has no carrier until both ends are up, and a gateway route needs it.
            ipr.route("add", dst="0.0.0.0/0", gateway=INTERNET_ADDRESS)

    def check_isolated(self) -> None:
        """Refuse to go on if either namespace holds a link or route the harness did not make.

        Raises:
            NotIsolated: naming what is there that should not be.
        """
        check_sealed(self.uplink, UPLINK_SEALED)
        check_sealed(self.internet, INTERNET_SEALED)

    def start_servers(self) -> None:
        """Make the CA, the servers' certificate and the package index, start the servers
        inside `internet` and
        wait until every socket of theirs is bound."""
        ca = trustme.CA(organization_name="fake internet")
        ca.cert_pem.write_to_path(str(self.ca_pem))
        leaf = ca.issue_cert(*self.names, INDEX_NAME)
        cert, key = self.workdir / "server.pem", self.workdir / "server.key"
        leaf.private_key_pem.write_to_path(str(key))
        for i, blob in enumerate(leaf.cert_chain_pems):
            blob.write_to_path(str(cert), append=i > 0)
        config = self.workdir / "servers.json"
        ready = self.workdir / "servers.ready"
        make_index(self.workdir / "index")
        config.write_text(json.dumps({
            "names": {**self.names, **self.dns_only, INDEX_NAME: INDEX_ADDRESS}, "dns": DNS_ADDRESS,
            "cert": str(cert), "key": str(key), "ready": str(ready),
            "index_address": INDEX_ADDRESS, "index_root": str(self.workdir / "index"),
            "socks": {"address": SOCKS_ADDRESS, "username": SOCKS_USER,
                      "password": SOCKS_PASSWORD, "log": str(self.socks_log)},
        }))  # fmt: skip
        with open(self.server_log, "ab") as log:
            self.servers = self.internet.popen(
                [sys.executable, "-m", "tests.network.servers", str(config)],
                stdout=log, stderr=log, cwd=Path(__file__).parents[2],
            )  # fmt: skip
        wait_until(lambda: self._ready(ready), 30, "the fake internet's servers to listen")

    def _ready(self, ready: Path) -> bool:
        assert self.servers is not None
        assert self.servers.poll() is None, f"servers exited: {self.server_log.read_text()}"
        return ready.exists()

    def pids(self) -> list[int]:
        """Every process the harness or its user started in its namespaces."""
        return [p.pid for ns in (self._uplink, self._internet) if ns for p in ns.processes]

    def close(self) -> None:
        """Stop every process started in the namespaces, delete them (and so every link,
        address and route in them) and the temp files; what `__init__` left half made too."""
        # Every undo runs even when one before it fails; the last registered runs first.
        with contextlib.ExitStack() as undo:
            undo.callback(shutil.rmtree, self.workdir, ignore_errors=True)
            for ns in (self._internet, self._uplink):
                if ns is not None:
                    undo.callback(ns.remove)


def set_sysctls(values: dict[str, str]) -> None:
    """Write /proc/sys/KEY = VALUE for the namespace the calling thread is in."""
    for key, value in values.items():
        Path("/proc/sys", key).write_text(value)


@contextlib.contextmanager
def running_fake_internet(
    names: dict[str, str] | None = None, dns_only: dict[str, str] | None = None
) -> Iterator[FakeInternet]:
    """A built, checked and serving fake internet, removed whatever happens.

    Raises:
        NotIsolated: a namespace held something the harness did not make.
    """
    net = FakeInternet(names, dns_only)
    try:
        net.build()
        net.check_isolated()
        net.start_servers()
        yield net
    finally:
        net.close()
