"""Container images as template layers: references (reference), fetching with skopeo (skopeo),
the pulled manifest and config (manifest), writing a tar into a directory safely (tar_tree),
unpacking a layer for overlayfs (unpack), the store of unpacked layers shared by every image
(layers), and a whole pull (pull)."""
