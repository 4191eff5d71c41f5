"""Alarms: step-aware rules over ingested values, alert state, signed webhooks via a durable outbox.

One room per stage of the path, in order: `evaluating` (rules decide, each stream in step order),
`recording` (alerts, incidents and outbox messages, in the transaction that evaluated them),
`delivering` (the outbox drained into receivers); `configuring` (rules, receivers, silences,
packs and backtests) sits beside. `service` drives a batch through the stages, `wiring` assembles
the feature, and `store` and `ids` serve every room. `ARCHITECTURE.md` walks an alert through
them, module by module.
"""
