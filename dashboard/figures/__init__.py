"""Figures as pure functions: rows in, `go.Figure` out (unit-tested without a browser)."""
