"""What sandboxd does on the host to make, run and remove one sandbox: cgroups, the disk image
and its loop device, idmapped layers and the overlay root, the nspawn container, user and
network namespaces, uid ranges, kernel limits, the base image's build and the sandbox's
journal. `runtime.Runtime` is the one entry point the lifecycle uses."""
