"""The cluster side of a gateway: sandboxes placed on node agents, their catalog in the shared
database, and their traffic routed to the node that runs them (docs/sandboxd.md, "Gateways")."""
