"""Durations as an operator types them (``30m``, ``2h``, ``1d``), read one way by every face.

The CLI's ``--older-than`` and ``--expires-in`` and the console's "expires in"
field all go through :func:`parse_duration`, so the same text means the same
number of seconds, and is refused with the same one-line message, wherever it
is typed. Nothing here touches a ledger.
"""

from __future__ import annotations

import re

from effectguard.ledger._resolution import MAX_APPROVAL_SECONDS

__all__ = ["DURATION_UNITS", "parse_approval_duration", "parse_duration"]

#: Seconds in each unit a duration may be written in.
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")

#: The longest duration anything accepts unless told otherwise: 1000 years.
_LONGEST = 1000 * 366 * 86400.0

#: How much of a refused text a message quotes: enough to recognise it, never a page of it.
_QUOTED = 40


def parse_duration(
    text: str,
    *,
    field: str = "--older-than",
    longest: float | None = None,
    too_long: str = "longer than 1000 years: nothing is that old",
) -> float:
    """Return the seconds ``text`` names: a number and one of s, m, h, d, w (``30d``, ``1.5h``).

    Case and surrounding blanks are ignored. Anything else, or more than
    ``longest`` seconds (default 1000 years), is a ``ValueError`` whose one-line
    message starts with ``field`` and quotes at most 40 characters of ``text``.
    The result is finite and never negative; it may be 0.
    """
    found = _DURATION.fullmatch(text.strip().lower())
    quoted = repr(text[:_QUOTED])
    if found is None:
        msg = f"{field} {quoted} is not a duration: write a number and s, m, h, d or w (30d)"
        raise ValueError(msg)
    seconds = float(found.group(1)) * DURATION_UNITS[found.group(2)]
    if seconds > (_LONGEST if longest is None else longest):
        msg = f"{field} {quoted} is {too_long}"
        raise ValueError(msg)
    return seconds


def parse_approval_duration(text: str, *, field: str = "--expires-in") -> float:
    """Return how long an approval may wait for its call, in seconds, from ``text`` (``30m``).

    Above 0 and at most ten years (the ledger's
    :data:`~effectguard.ledger._resolution.MAX_APPROVAL_SECONDS`), so whatever
    this returns the ledger's ``approve`` accepts; anything else is a
    ``ValueError`` with a one-line message starting with ``field``.
    """
    seconds = parse_duration(
        text,
        field=field,
        longest=MAX_APPROVAL_SECONDS,
        too_long="longer than ten years: approve for less, and again when needed",
    )
    if seconds <= 0:
        msg = f"{field} {text[:_QUOTED]!r} is no time at all: give a duration above 0 (30m)"
        raise ValueError(msg)
    return seconds
