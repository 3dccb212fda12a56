"""Generated protobuf-py and connectrpc code for proto/. DO NOT EDIT: run scripts/generate."""
