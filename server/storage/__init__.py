"""Storage: SQLAlchemy Core over DuckDB (default, embedded) or PostgreSQL (shared deployments).

It knows nothing of HTTP, Dash or alarms: services call it with plain values.
"""
