"""Volumes: named filesystems that outlive sandboxes, each an ext4 image loop-mounted on the
host (.storage), recorded in the store (.catalog), reached from outside through tokens scoped to
one volume (.tokens) and a tree walk that never leaves it (.tree)."""
