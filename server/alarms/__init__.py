"""Alarms: step-aware rules over ingested values, alert state, signed webhooks via a durable outbox.

Pure core (`rules`, `state`, `payloads`, `signing`, `outbound`, `defaults`) and I/O at the edges
(`store`, `service`, `delivery`, `wiring`).
"""
