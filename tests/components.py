"""Reading a Dash layout in tests without a browser: a component found by its id."""

from __future__ import annotations

from typing import Any


def find(component: Any, component_id: str) -> Any:
    """The component with `component_id` anywhere under `component`; None when there is none."""
    if getattr(component, "id", None) == component_id:
        return component
    children = getattr(component, "children", None)
    for child in children if isinstance(children, list) else [children]:
        if child is not None and not isinstance(child, str):
            found = find(child, component_id)
            if found is not None:
                return found
    return None
