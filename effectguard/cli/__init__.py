"""Command-line tools built on effectguard's public API (``agent-effect-ops`` for operators)."""
