"""Unit constants and converters: the only place where scale factors such as 1e-3 or 2**30 appear.

Inside the package every quantity is in SI base units (seconds, bytes, FLOPs, FLOP/s, bytes/s);
conversion happens only at the edges (CLI parsing, tables, data files) through this module.
GB means 1e9 bytes and GiB means 2**30 bytes; names always say which.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from .errors import ConfigError

KIB = 2**10
MIB = 2**20
GIB = 2**30
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
TERA = 1e12
MS = 1e-3
US = 1e-6

_DURATION_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(s|ms|us|µs|ns)?\s*$",
                          re.IGNORECASE)
#: Decimal places each unit moves the number (``ms``: 3); the seconds are the decimal value
#: rounded once, so ``51ms``, ``0.051s`` and ``51000us`` are the same float.
_DURATION_DIGITS = {"s": 0, "ms": 3, "us": 6, "µs": 6, "ns": 9}


#: The shortest duration a latency SLO may name, seconds: 1 µs, below a kernel launch.
MIN_DURATION_S = 1e-6


def parse_duration_s(text: str, *, field: str) -> float:
    """Parse a duration such as ``"50ms"``, ``"1.5s"`` or ``"200us"`` into seconds.

    A unit is required: a bare ``50`` is ambiguous (50 ms is the usual TPOT, 50 s a TTFT
    nobody sets), so it is refused rather than read as seconds. Units are read in any case
    (``50MS``); a signed number is read, so that ``-50ms`` is refused as not positive.

    Args:
        text: the value as typed.
        field: the option or field name, used in the error message.

    Returns:
        The duration in seconds, finite and > 0: the decimal value rounded once, so the same
        time in any unit is the same float (``51ms`` = ``0.051s``).

    Raises:
        ConfigError: if the text is not a positive finite number with a unit s/ms/us/ns, or
            is under :data:`MIN_DURATION_S`.
    """
    m = _DURATION_RE.match(str(text))
    if not m:
        raise ConfigError(f"{field}: cannot read duration {text!r}; write e.g. 50ms, 1.5s or 200us")
    if m.group(1).startswith("-"):
        raise ConfigError(f"{field}: duration must be positive and finite, got {text!r}")
    if m.group(2) is None:
        raise ConfigError(f"{field}: {text!r} has no unit; write {m.group(1)}ms or "
                          f"{m.group(1)}s")
    try:
        value = float(Decimal(m.group(1)).scaleb(-_DURATION_DIGITS[m.group(2).lower()]))
    except ArithmeticError:              # decimal.Overflow beyond the context's exponent
        value = math.inf
    if not 0 < value < float("inf"):
        raise ConfigError(f"{field}: duration must be positive and finite, got {text!r}")
    if value < MIN_DURATION_S:
        raise ConfigError(f"{field}: {text!r} is under 1us, shorter than any GPU kernel; "
                          f"write at least 1us")
    return value


def to_ms(seconds: float) -> float:
    """Seconds to milliseconds, for display."""
    return seconds / MS


def format_ms(seconds: float, digits: int = 2) -> str:
    """A time for people: milliseconds to ``digits`` decimals (``"6.30 ms"``), or
    microseconds when that would print as zero (under 10 µs, e.g. a ``1us`` SLO:
    ``"1.00 µs"``)."""
    if 0 < abs(seconds) < 10 ** -(digits + 3):
        return f"{seconds * 1e6:.{digits}f} µs"
    return f"{to_ms(seconds):.{digits}f} ms"


def to_gib(n_bytes: float) -> float:
    """Bytes to GiB (2**30 bytes), for display."""
    return n_bytes / GIB
