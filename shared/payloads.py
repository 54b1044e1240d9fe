"""An event's JSON on its way into Postgres and back out.

Postgres keeps a jsonb number exactly (`1e5000` is a 5,001-digit numeric) and prints it
without an exponent; Python does not keep it: `1e5000` parses as `inf`, `1e-400` as
`0.0`, `1e308` as a float that is not the integer Postgres prints back, and an integer of
more than 4,300 digits (what Postgres prints `1e5000` back as) is refused by `int()`.
Such a number would be acknowledged and then be unreadable by every statement that loads
the row. So the ingest parses with `parse`, which refuses every number that would not
come back unchanged, and whatever reads a stored payload uses `load`, which never raises:
a row that still cannot be loaded (stored before this check, or by other means) fails its
own job with the reason (worker.jobs), and is shown as text by the console and
`webhooks show`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

_NONZERO_DIGIT = re.compile(r"[1-9]")


class UnsafeNumber(ValueError):
    """A JSON number that would not survive Postgres and Python unchanged."""


def _float(literal: str) -> float:
    """A JSON number with a fraction or an exponent, if what Postgres gives back for it
    loads as the same value: Postgres prints numerics without an exponent, so `1e308`
    comes back as the integer 10**308, which is not the float 1e308."""
    value = float(literal)
    if not math.isfinite(value):
        raise UnsafeNumber(f"number {literal[:40]} is out of range")
    mantissa = literal.lower().partition("e")[0]
    if value == 0.0 and _NONZERO_DIGIT.search(mantissa):
        raise UnsafeNumber(f"number {literal[:40]} is too small to keep")
    if "e" in literal or "E" in literal:
        exact = Decimal(literal)
        exponent = exact.as_tuple().exponent
        # No digits after the point in Postgres's text: it loads as an int, exactly.
        if isinstance(exponent, int) and exponent >= 0 and int(exact) != value:
            raise UnsafeNumber(f"number {literal[:40]} would come back as another value")
    return value


def _constant(name: str) -> Any:
    raise UnsafeNumber(f"{name} is not JSON")


def parse(text: str) -> Any:
    """Strict JSON: ValueError (UnsafeNumber among them) for a body that is not JSON or
    holds a number out of what Postgres and Python agree on (NaN and Infinity included);
    integers beyond Python's digit limit raise ValueError from int() itself."""
    return json.loads(text, parse_float=_float, parse_constant=_constant)


@dataclass(frozen=True)
class Unloadable:
    """A stored payload that Python cannot load, and why; `text` is what Postgres holds."""

    reason: str
    text: str


def load(text: str | None) -> Any:
    """A stored payload (jsonb as text) as Python values, or Unloadable."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        return Unloadable(f"{type(error).__name__}: {error}"[:300], text)
