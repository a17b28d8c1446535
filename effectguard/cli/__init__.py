"""effectguard's command-line tools (built with Click)."""
