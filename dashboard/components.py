"""Dash components whose generated modules confuse type checkers, re-exported as `Any`."""

from __future__ import annotations

from typing import Any

import dash.dash_table as _dash_table

DataTable: Any = vars(_dash_table)["DataTable"]
