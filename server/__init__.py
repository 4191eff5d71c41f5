"""The Mismatch Monitor server: ingest and read API, alarms and webhooks, over DuckDB or
PostgreSQL. `ARCHITECTURE.md` at the repository's root maps its packages, the rooms of the alarm
pipeline and of storage, and the walks a metric and an alert take through them.
"""
