"""Delivering: the outbox drained into receivers, exactly once per message, to checked targets.

`delivery` is the worker; `drafts` and `diagnosis` finish a message's body on its thread;
`payloads` and `signing` shape and sign it; `outbound` and `safe_http` decide where a webhook
may go and post it there and nowhere else. It knows nothing of evaluation or recording: it reads
the outbox and writes only its own record.
"""
