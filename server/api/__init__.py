"""HTTP API: thin routes over the services; errors mapped to HTTP in `errors.py`."""
