"""Alarm state as stored: rules, receivers and silences (`config`), evaluation's states and
cursors (`states`), alerts (`alerts`), incidents (`incidents`), the outbox (`outbox`) and the
delivery worker's record (`deliveries`), the packs a project received (`packs`) and who changed
which configuration (`changes`).
"""
