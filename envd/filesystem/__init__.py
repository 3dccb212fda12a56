"""The filesystem.Filesystem Connect service."""
