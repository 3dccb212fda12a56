"""Client-side helpers every test area shares."""

from __future__ import annotations

import base64

# The SDKs select the user with Basic auth and an empty password.
AS_USER = {"authorization": "Basic " + base64.b64encode(b"user:").decode()}
