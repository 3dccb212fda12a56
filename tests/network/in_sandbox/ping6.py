"""Turns IPv6 back on in the sandbox (as its root may: the namespace is its own), then sends an
ICMPv6 echo request to ADDRESS, a link-local address on eth0. Prints "answered" for the echo
reply, "unreachable CODE" for an ICMPv6 "destination unreachable" from ADDRESS (it is there and
refuses), or the errno the kernel gives when nothing answers neighbour discovery."""

from __future__ import annotations

import socket
import struct
import sys
import time

IPV6_RECVERR = 25  # linux/in6.h: the kernel's own "address unreachable" reaches the socket
IFA_F_TENTATIVE = 0x40  # linux/if_addr.h
ECHO_REQUEST, ECHO_REPLY, UNREACHABLE = 128, 129, 1

# No duplicate address detection: the address is usable at once. `all` turns lo's IPv6 back on
# too, which the kernel's error to this socket travels through.
for setting, value in (("eth0/accept_dad", "0"), ("all/disable_ipv6", "0")):
    with open(f"/proc/sys/net/ipv6/conf/{setting}", "w") as f:
        f.write(value)


def has_link_local(ifname: str) -> bool:
    """Whether the kernel has given IFNAME its link-local address yet, and not as tentative: it
    adds the address after IPv6 comes on, and a send before then has no source (EADDRNOTAVAIL)."""
    with open("/proc/net/if_inet6") as f:
        for line in f:
            address, _, _, _, flags, name = line.split()
            if (
                name == ifname
                and address.startswith("fe80")
                and not int(flags, 16) & IFA_F_TENTATIVE
            ):
                return True
    return False


while not has_link_local("eth0"):
    time.sleep(0.05)
target = sys.argv[1]
with socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) as sock:
    sock.setsockopt(socket.IPPROTO_IPV6, IPV6_RECVERR, 1)
    sock.settimeout(30)
    sock.sendto(struct.pack(">BBHHH", ECHO_REQUEST, 0, 0, 0x5A5A, 1) + b"probe",
                (target, 0, 0, socket.if_nametoindex("eth0")))  # fmt: skip
    try:
        while True:
            data, source = sock.recvfrom(65535)
            if source[0].split("%")[0] != target:
                continue  # neighbour discovery, router solicitations
            if data[0] == ECHO_REPLY:
                sys.stdout.write("answered\n")
                break
            if data[0] == UNREACHABLE:
                sys.stdout.write(f"unreachable {data[1]}\n")
                break
    except OSError as e:
        sys.stdout.write(f"{e.errno}\n")
