"""Benchmarks: each measures envd against a baseline in the same run."""
