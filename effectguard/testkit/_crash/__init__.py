"""The crash machinery the scenarios use: a forked child per episode, the contract kinds."""
