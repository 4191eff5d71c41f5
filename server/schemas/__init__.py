"""Pydantic models of the HTTP contract: `…In` for what arrives, `…Out` for what leaves."""
