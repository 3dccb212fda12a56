"""End-to-end suites that drive the official, unmodified E2B SDKs (Python and JS) against envd."""
