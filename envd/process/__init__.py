"""The process.Process Connect service."""
