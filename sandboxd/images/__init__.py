"""Container images as template layers: references (reference), fetching with skopeo (skopeo),
the pulled manifest and config (manifest), writing a tar into a directory safely (tar_tree),
unpacking a layer for overlayfs (unpack), the images pulled before (known), and a whole pull
into the layer store, sandboxd.layers (pull)."""
