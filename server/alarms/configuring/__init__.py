"""Configuring: rules, receivers and silences as a service, the packs a project is given, and
backtests of rules over stored runs before they are saved.

`config` is the configuration service; `defaults`, `correction_pack` and `moe_pack` are the rule
packs; `backtest` replays rules (saved or drafts) through the same evaluator live ingestion uses.
"""
