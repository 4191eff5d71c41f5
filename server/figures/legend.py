"""Where legends go: above the plotting area, right-aligned.

A horizontal legend under the plot lands on the x-axis title at the default window size (it
did, on the bucket charts); above the plot it is clear of every axis title, and the figure
title keeps the top-left corner.
"""

from __future__ import annotations

from typing import Any

LEGEND_ON_TOP: dict[str, Any] = {
    "orientation": "h",
    "x": 1.0,
    "xanchor": "right",
    "y": 1.02,
    "yanchor": "bottom",
}
