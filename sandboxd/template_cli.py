"""`sandboxd template ls` and `sandboxd template rm`: the templates (and snapshots, which are
templates too) of a state directory from the command line, beside a running serve or without
one (the store is shared: through SQLite's WAL, or the PostgreSQL database serve uses; what
`rm` removes is what `DELETE /templates/{id}` removes, and it refuses the same)."""

from __future__ import annotations

import asyncio
import sys
from typing import TYPE_CHECKING

from sandboxd.builds.collect import layer_users
from sandboxd.errors import NotAllowed
from sandboxd.host.removal import remove_tree
from sandboxd.ids import rfc3339
from sandboxd.layers.collect import collect
from sandboxd.layers.quota import allocated
from sandboxd.layers.store import LayerStore
from sandboxd.lifecycle.disk_pause import layer_prefix
from sandboxd.templates.catalog import Templates, split_ref
from sandboxd.templates.snapshots import layer_name, snapshot_id

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from pathlib import Path

    from sandboxd.store.interface import Store


def add_parsers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    state_dir_option: Callable[[argparse.ArgumentParser], None],
) -> None:
    ls = commands.add_parser(
        "ls", help="list the templates (tags, builds), snapshots and paused sandboxes (size)"
    )
    rm = commands.add_parser("rm", help="delete a template (not while sandboxes use it)")
    rm.add_argument("template", metavar="ID-OR-NAME")
    for p in (ls, rm):
        state_dir_option(p)


def run(args: argparse.Namespace, state_dir: Path, store: Store) -> None:
    """Raises SandboxError (unknown template, refused deletion)."""
    if args.template_command == "ls":
        _list(store)
        layers = LayerStore(state_dir / "layers")
        _list_snapshots(store, layers)
        _list_paused(store, layers)
    else:
        asyncio.run(_remove(store, state_dir, args.template))


def _list(store: Store) -> None:
    sys.stdout.write(
        f"{'TEMPLATE':22} {'NAME':24} {'STATUS':9} {'BUILDS':>6} {'UPDATED':27} TAGS\n"
    )
    for t in store.templates():
        tags = ",".join(tag.tag for tag in store.tags(t.template_id))
        sys.stdout.write(f"{t.template_id:22} {t.alias or '-':24} {t.build_status:9} "
                         f"{t.build_count:6d} {rfc3339(t.updated_at):27} {tags or '-'}\n")  # fmt: skip


def _list_snapshots(store: Store, layers: LayerStore) -> None:
    """Each tag of a snapshot: the id a create boots it by, its sandbox, when it was taken, and
    what its own layer (the sandbox's files; the layers below are its template's) takes on
    disk."""
    records = {r.build_id: r for r in store.snapshots()}
    sys.stdout.write(f"\n{'SNAPSHOT':40} {'SANDBOX':22} {'TAKEN':27} {'SIZE':>10}\n")
    for t in store.templates():
        for tag in store.tags(t.template_id):
            record = records.get(tag.build_id)
            if record is None:
                continue
            layer = layers.find(layer_name(record.build_id))
            size = 0 if layer is None else allocated((layer,))
            sys.stdout.write(f"{snapshot_id(t, tag.tag):40} {record.sandbox_id:22} "
                             f"{rfc3339(record.created_at):27} {size / 2**20:6.1f} MiB\n")  # fmt: skip


def _list_paused(store: Store, layers: LayerStore) -> None:
    """Each paused sandbox: how it is paused and what its pause layers (its files, kept on the
    state disk against the storage quota) take."""
    sys.stdout.write(f"\n{'PAUSED SANDBOX':22} {'MODE':10} {'SIZE':>10}\n")
    for sandbox in store.sandboxes():
        if sandbox.state != "paused":
            continue
        prefix = layer_prefix(sandbox.sandbox_id)
        size = allocated(tuple(p for p in layers.layers() if p.name.startswith(prefix)))
        mode = sandbox.pause_mode or "-"
        sys.stdout.write(f"{sandbox.sandbox_id:22} {mode:10} {size / 2**20:6.1f} MiB\n")


async def _remove(store: Store, state_dir: Path, ref: str) -> None:
    template_ids = {s.template_id for s in store.sandboxes()}
    templates = Templates(store, lambda template_id: template_id in template_ids, state_dir)
    template = templates.get(split_ref(ref)[0])  # a snapshot's `name:tag`: its template
    if store.builds(template.template_id, status="building"):
        raise NotAllowed(f"template '{ref}' is being built: delete it through the API")
    await templates.delete(template.template_id)
    await asyncio.to_thread(remove_tree, state_dir / "uploads" / template.template_id)
    users = layer_users(store, state_dir / "sandboxes", state_dir)
    removed = collect(LayerStore(state_dir / "layers"), users)
    sys.stdout.write(f"deleted template {template.template_id}; {len(removed)} unused layers "
                     "removed\n")  # fmt: skip
