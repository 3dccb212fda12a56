"""Kernel mechanisms sandboxd uses on the host, engine- and network-neutral: cgroups, disk
images and loop devices, overlay and idmapped mounts, user and network namespaces, uid ranges,
kernel limits, removal without following links, and the libc calls Python lacks."""
