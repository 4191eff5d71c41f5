"""The schema: every table as SQLAlchemy Core (`tables`, `alarm_tables`, `identity_tables`) and
the Alembic history run from code (`migrate`). The other rooms of storage build on it.
"""
