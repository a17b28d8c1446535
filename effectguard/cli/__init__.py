"""Command-line tools built on effectguard's public API.

``agent-effect-ops`` for operators (:mod:`effectguard.cli.ops`); ``agent-effect``
for scenarios and the fault matrix (:mod:`effectguard.cli.main`).
"""
