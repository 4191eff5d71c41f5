"""People, not pasted tokens: OpenID Connect sign-in, a trusted auth proxy, and the mapping of
users and groups to projects with read or admin roles.

Every way in ends in the same `server.auth.Principal` a token gives (`resolver.Identity`), so the
API, the dashboard, /metrics and the alarms filter people exactly as they filter tokens.
"""
