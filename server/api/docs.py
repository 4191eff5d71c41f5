"""The API's documentation page (/docs), served whole from the package: Swagger UI's scripts,
styles and icons come from the `swagger-ui-py` distribution's static files, never from a CDN,
so the page works on a cluster without access to the internet.

FastAPI's own /docs page loads Swagger UI from a CDN; the app is built without it (and without
/redoc, which has no packaged assets) and gets these routes instead.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse, RedirectResponse
from starlette.staticfiles import StaticFiles

DOCS_PATH = "/docs"
OAUTH2_REDIRECT_PATH = "/docs/oauth2-redirect"
ASSETS_PATH = "/docs/assets"
REDOC_PATH = "/redoc"


def assets_dir() -> Path:
    """Where the installed Swagger UI distribution keeps its files."""
    import swagger_ui

    return Path(swagger_ui.__file__).resolve().parent / "static"


def install(app: FastAPI) -> None:
    """Serve /docs from the package (the app must be built with docs_url=None)."""
    app.mount(ASSETS_PATH, StaticFiles(directory=assets_dir()), name="docs-assets")

    @app.get(DOCS_PATH, include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} · API",
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon-32x32.png",
            oauth2_redirect_url=OAUTH2_REDIRECT_PATH,
        )

    @app.get(REDOC_PATH, include_in_schema=False)
    def redoc() -> RedirectResponse:
        """ReDoc has no packaged assets: its address leads to the page that works offline."""
        return RedirectResponse(DOCS_PATH, status_code=307)

    @app.get(OAUTH2_REDIRECT_PATH, include_in_schema=False)
    def oauth2_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()
