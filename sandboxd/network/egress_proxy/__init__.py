"""The domain proxy: TCP to ports 80 and 443 of sandboxes whose `allowOut` names domains is
redirected here (sandboxd.network.firewall), the name read from the HTTP Host header or the TLS
ClientHello's SNI, and the connection allowed, sent to the name's own address, or closed, as E2B's
orchestrator decides (docs/sandboxd.md, "Sandbox networking")."""
