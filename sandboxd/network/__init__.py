"""Sandboxes' networks, serve-wide and per sandbox: veth pairs in /30 slots, the nftables firewall
with E2B's egress rules, the DNS forwarder, rules changed on a running sandbox, the sweep of
leftovers, and the domain-filtering egress proxy. serve makes them; the runtime's steps use the
slot and firewall of each sandbox."""
