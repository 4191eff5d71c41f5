"""The neutral domain: plain types and vocabularies that every layer shares and no layer owns.

Records and write results, runs, rules, alerts, receivers and silences, label filters, id and
name patterns, canonical metrics, token scopes and the dashboard's URL scheme live here, once.
Storage, services, alarms, the API's schemas and the dashboard import from here; this package
imports nothing of the project's own (a test keeps that true), so it can never become the place
where an HTTP model or a database row leaks across a layer.
"""
