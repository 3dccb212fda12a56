"""The fake internet's refusal (docs/testing.md, "Network tests"): before a test may send
anything from the harness's namespaces, their links and routes must be exactly the ones the
harness made, so that no packet can leave for a network the test did not make."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.network.namespaces import NetworkNamespace

RTPROT_KERNEL = 2  # routes the kernel derives from addresses (rtnetlink.h)


class NotIsolated(RuntimeError):
    """A namespace of the harness holds a link or route the harness did not make."""


@dataclass(frozen=True)
class Sealed:
    """What a namespace may hold: these links (by name) and, besides the kernel's own routes
    for their addresses, these routes: (destination "addr/len" or "default", gateway or "",
    link)."""

    links: frozenset[str]
    routes: frozenset[tuple[str, str, str]]


def problems(ns: NetworkNamespace, sealed: Sealed) -> list[str]:
    """What in `ns` the harness did not make (empty: nothing)."""
    found = []
    with ns.ipr() as ipr:
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in ipr.get_links()}
        found += [f"link {name}" for name in sorted(set(names.values()) - sealed.links)]
        routes = set()
        for route in ipr.route("dump", family=socket.AF_UNSPEC):
            dst = route.get_attr("RTA_DST")
            where = f"{dst}/{route['dst_len']}" if dst else "default"
            via = route.get_attr("RTA_GATEWAY") or ""
            link = names.get(route.get_attr("RTA_OIF"), "")
            described = f"route {where} via {via or '-'} dev {link or '-'} table {route['table']}"
            # Several next hops or a nexthop object are not something the harness makes, and
            # a route out of a link it did not make is the escape this check exists for.
            foreign_link = link and link not in sealed.links
            if route.get_attr("RTA_MULTIPATH") or route.get_attr("RTA_NH_ID") or foreign_link:
                found.append(described)
            elif route["proto"] != RTPROT_KERNEL:
                routes.add((where, via, link))
                if (where, via, link) not in sealed.routes:
                    found.append(described)
        found += [f"missing route {r}" for r in sorted(sealed.routes - routes)]
    return found


def check_sealed(ns: NetworkNamespace, sealed: Sealed) -> None:
    """Refuse a namespace that could route somewhere the harness did not make.

    Raises:
        NotIsolated: naming everything unexpected in it.
    """
    if found := problems(ns, sealed):
        raise NotIsolated(
            f"refusing to use network namespace {ns.name}: it holds what the fake internet "
            f"did not make ({', '.join(found)}); tests may only reach loopback and namespaces "
            "they made (docs/testing.md, Network tests)"
        )
