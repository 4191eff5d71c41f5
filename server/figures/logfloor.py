"""Values a log axis cannot draw (zero, negative): marked at the axis floor, never a line that
falls off the chart.

A k3 of exactly 0 (a step where rollout and trainer agree to the bit) is data, but log(0) is
-inf: Plotly would draw the line plunging out of the plot area, which reads as a crash. Such
points leave a gap in the line and get a marker on an overlaid axis fixed to [0, 1], just
above the floor, whose hover text gives the value and why it sits there.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

FLOOR_AXIS = "y2"
"""The overlaid axis the floor markers sit on (the layout's `yaxis2`, range fixed)."""
FLOOR_Y = 0.3
"""Height of a floor marker on `FLOOR_AXIS`, whose range is [0, 20]: 1.5% above the floor."""
NOTE = "cannot be drawn on a log axis: marked at the axis floor"
"""What a floor marker's hover text says of its value."""


def nonpositive(ys: Any) -> Any:
    """Mask of the finite values ≤ 0 (NaN and ±Inf are drawn elsewhere as non-finite)."""
    values = np.asarray(ys, dtype=np.float64)
    return np.isfinite(values) & (values <= 0)


def without_nonpositive(ys: Any) -> Any:
    """`ys` with every finite value ≤ 0 made NaN: a gap in the line instead of a plunge."""
    out = np.array(ys, dtype=np.float64 if np.asarray(ys).dtype == np.float64 else np.float32)
    out[nonpositive(out)] = np.nan
    return out


def floor_marks(
    xs: Sequence[Any] | Any, values: Sequence[float] | Any, *, name: str, color: str, x_name: str
) -> dict[str, Any]:
    """A marker per value ≤ 0, at the floor of the log axis, its value and the note on hover
    (`name` is escaped already; `x_name` names the x of the hover text, e.g. "step")."""
    xs_list = np.asarray(xs).tolist()
    vals = np.asarray(values, dtype=np.float64).tolist()
    return {
        "type": "scatter",
        "x": xs_list,
        "y": [FLOOR_Y] * len(xs_list),
        "yaxis": FLOOR_AXIS,
        "mode": "markers",
        "marker": {"symbol": "triangle-down", "size": 10, "color": color},
        "name": f"{name} ≤ 0 (at floor)",
        "legendgroup": name,
        "hovertext": [
            f"{name} = {v:g} at {x_name} {x}: {NOTE}" for x, v in zip(xs_list, vals, strict=True)
        ],
        "hoverinfo": "text",
        "cliponaxis": False,
    }


def floor_axis() -> dict[str, Any]:
    """The layout entry of the overlaid axis the floor markers sit on."""
    return {"overlaying": "y", "range": [0, 20], "visible": False, "fixedrange": True}
