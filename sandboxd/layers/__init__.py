"""Layers: the one store of the read-only layers sandboxes stack, whatever made them (an image
pull, a build step, a sandbox's exported diff), with its read-only views (store); the one rule
for which are in use and may be collected (collect); and reading an image's files through its
layers from the host without following its links (layer_view, image_files)."""
