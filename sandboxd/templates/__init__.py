"""Templates: the catalog (names, tags, builds, what each resolves to) and what a template
boots (its image: layers, init, user, workdir, environment, start command)."""
