"""Template builds: what turns an image and a template's steps into layers a sandbox boots (the
envd layer every template shares, the provisioning layer each pulled image gets, a COPY step's
layer, a build sandbox's snapshot)."""
