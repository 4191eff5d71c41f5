"""Okabe-Ito: a palette that stays distinguishable with the common colour-vision deficiencies."""

from __future__ import annotations

OKABE_ITO = (
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#F0E442",  # yellow
    "#000000",  # black
)
NONFINITE = "#D55E00"
REFERENCE = "#000000"


def color(index: int) -> str:
    return OKABE_ITO[index % len(OKABE_ITO)]


def faint(hex_color: str, alpha: float = 0.18) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
