"""Self-contained HTML reports: served by the API and downloaded from the dashboard, read through
the same read port and drawn with the same figures (`server.figures`)."""
