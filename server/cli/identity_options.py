"""`mismatch serve`'s options for signing people in: OpenID Connect and the auth proxy. The
client secret has no option: it is read from MISMATCH_OIDC_CLIENT_SECRET, never a command line
that `ps` shows."""

from __future__ import annotations

from typing import Annotated

import typer

OidcIssuerOpt = Annotated[
    str | None,
    typer.Option(
        help="Sign people in with this OpenID Connect issuer (https://…); the client secret "
        "comes from MISMATCH_OIDC_CLIENT_SECRET"
    ),
]
OidcClientIdOpt = Annotated[str | None, typer.Option(help="The OIDC client id registered here")]
OidcGroupsClaimOpt = Annotated[
    str | None,
    typer.Option(help="The ID token claim that lists a person's groups (e.g. groups)"),
]
IdentityMapOpt = Annotated[
    str | None,
    typer.Option(help="A JSON file mapping users and groups to project roles (see README)"),
]
AuthProxyHeaderOpt = Annotated[
    str | None,
    typer.Option(
        help="Trust this header (e.g. X-Forwarded-User) to name the signed-in user, from the "
        "--auth-proxy-from addresses only; from anywhere else it is refused"
    ),
]
AuthProxyGroupsHeaderOpt = Annotated[
    str | None, typer.Option(help="The proxy's header listing the user's groups, comma-separated")
]
AuthProxyFromOpt = Annotated[
    list[str] | None,
    typer.Option("--auth-proxy-from", help="The sign-in proxy's address or CIDR (repeatable)"),
]
