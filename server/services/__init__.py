"""Services: what routes, the dashboard and the CLI call. Pure of HTTP, thin over storage."""
