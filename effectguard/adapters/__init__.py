"""Framework adapters: each maps an unconfirmed effect onto its framework's own pause.

Each lives behind an extra and is imported by its full name
(``effectguard.adapters.mcp``, ``effectguard.adapters.openai_agents``); this
package imports none of them.
"""
