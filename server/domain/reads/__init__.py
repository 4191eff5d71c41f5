"""What the read side returns: the reader's scope and the read-models of runs, series, buckets,
exemplars, the hardware comparison, a run's attribution and the run page.

Frozen dataclasses (points of a series as named tuples: thousands per read) built by the read
services (`server.services.reads`) and read by the API's routes, which map them to their `…Out`
models, and by the dashboard, which draws them: one set of types for both readers, with no
HTTP model and no `Any` in what the port takes or returns.
"""
