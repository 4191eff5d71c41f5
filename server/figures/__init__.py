"""Figures as pure functions: rows in, a Plotly figure out (unit-tested without a browser).

Drawn by the dashboard's pages and inlined into the HTML reports the API serves
(`server.reports`), so they live where both can import them.
"""
