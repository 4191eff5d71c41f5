"""The view lives in the URL, so a link pasted in chat (or sent by an alarm) opens the same view."""

from __future__ import annotations

from urllib.parse import parse_qs

from server.domain.urls import query_string as encode

__all__ = ["as_float", "as_int", "as_list", "encode", "parse"]


def parse(search: str | None) -> dict[str, str]:
    if not search:
        return {}
    raw = parse_qs(search.lstrip("?"), keep_blank_values=False)
    return {key: values[-1] for key, values in raw.items() if values}


def as_list(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v]


def as_int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def as_float(value: str | None, default: float) -> float:
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default
