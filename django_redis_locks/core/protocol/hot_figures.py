"""The contention figures the scripts keep per name (lib/hot.lua), read back: the wire format
of the ``<ns>:{b}:hot`` hashes, decoded once here.

A member's figures are, for each window length (:data:`.constants.HOT_SHORT_MS`, then
:data:`.constants.HOT_LONG_MS`), the index of the current window (server ms // length), nine
figures of that window and nine of the window before it: refused, queued, left, waits, total
wait (ms), longest wait (ms), holds, total hold (ms), longest hold (ms); then (the 39th)
the score a name inherited when it took the place of the bucket's least contended one, which
the scripts rank by and the listings do not show. What the last
``length`` ms saw is estimated as the current window plus the part of the one before that is
still within reach, in proportion to time (so a steady rate is counted right); the longest
wait and hold are the longest of both windows.
"""

from __future__ import annotations

from dataclasses import dataclass

from .constants import HOT_LONG_MS, HOT_SHORT_MS

__all__ = ["FIGURES", "WINDOWS_MS", "Figures", "decode_figures"]

#: The window lengths the scripts count over (ms), in the order of the stored figures.
WINDOWS_MS = (HOT_SHORT_MS, HOT_LONG_MS)
#: How many figures each window has.
FIGURES = 9
_STRIDE = 1 + 2 * FIGURES


@dataclass(frozen=True, slots=True)
class Figures:
    """One name's contention over one window (see the module's docstring)."""

    refused: int
    queued: int
    left: int
    waits: int
    wait_ms: int  # in all
    longest_wait_ms: int
    holds: int
    hold_ms: int  # in all
    longest_hold_ms: int


def decode_figures(value: str, window_ms: int, now_ms: int) -> Figures:
    """The figures of the last ``window_ms`` (one of :data:`WINDOWS_MS`) at ``now_ms``
    (server time), from a member's stored value."""
    numbers = [int(part) for part in value.split()]
    base = WINDOWS_MS.index(window_ms) * _STRIDE
    if len(numbers) < base + _STRIDE:
        raise ValueError(f"contention figures too short: {value!r}")
    index = now_ms // window_ms
    stored = numbers[base]
    current = numbers[base + 1 : base + 1 + FIGURES]
    before = numbers[base + 1 + FIGURES : base + _STRIDE]
    if stored == index - 1:  # the stored window has ended: it is the one before now
        current, before = [0] * FIGURES, current
    elif stored != index:
        current, before = [0] * FIGURES, [0] * FIGURES
    share = 1 - (now_ms % window_ms) / window_ms  # of the window before, still within reach

    def total(at: int) -> int:
        return current[at] + round(before[at] * share)

    return Figures(
        refused=total(0),
        queued=total(1),
        left=total(2),
        waits=total(3),
        wait_ms=total(4),
        longest_wait_ms=max(current[5], before[5] if share > 0 else 0),
        holds=total(6),
        hold_ms=total(7),
        longest_hold_ms=max(current[8], before[8] if share > 0 else 0),
    )
