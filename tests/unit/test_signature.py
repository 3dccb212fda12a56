"""The /files URL signature against values computed independently with sha256sum and base64."""

from __future__ import annotations

from envd.http.signing import file_signature


def test_signature_without_expiration() -> None:
    # printf '%s' '/home/user/a.txt:read:user:secret' | sha256sum | xxd -r -p | base64
    expected = "v1_oO3VOyxXH3pkX/nhqGaqe3v8d+8vNhbGG2sLjuGWsuo"
    assert file_signature("/home/user/a.txt", "read", "user", "secret", None) == expected


def test_signature_with_expiration_and_empty_username() -> None:
    # printf '%s' '/home/user/a.txt:write::secret:1700000000' | sha256sum | ... | base64
    expected = "v1_dXwXe8Z+I6rQsEdqGqhGbWk2wYSZWKq9TN4jJyuhiGU"
    assert file_signature("/home/user/a.txt", "write", "", "secret", 1_700_000_000) == expected
