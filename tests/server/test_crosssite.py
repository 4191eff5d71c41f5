"""Cross-site protection through a real server: what a page on another site can make a browser
send (a rebinding Host, a cross-origin or cross-site write, a form or text/plain body) is refused
with the project's JSON error body and stores nothing, while scripts, collectors and the server's
own pages pass, and CORS answers only for configured origins."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from server.api.crosssite import allowed_hosts, trusted_origins
from server.config import Settings
from server.domain.origins import Origin, parse_origin, split_host
from tests import web
from tests.conftest import ServerProcess
from tests.factories import batch

pytestmark = pytest.mark.security

EVIL = "http://evil.example"
NOTEBOOK = "http://notebook.example:8888"


@pytest.fixture(scope="module")
def open_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The default: loopback, no tokens, no CORS."""
    tmp = tmp_path_factory.mktemp("crosssite")
    server = ServerProcess(tmp / "open.duckdb", log_dir=tmp).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def named_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Loopback, reached also by a LAN name and a public URL, with one CORS origin."""
    tmp = tmp_path_factory.mktemp("crosssite-named")
    args = [
        *("--allowed-host", "monitor.lan", "--allowed-host", "10.1.2.3"),
        *("--public-url", "https://monitor.example.com/mm", "--cors-origin", NOTEBOOK),
    ]
    server = ServerProcess(tmp / "named.duckdb", log_dir=tmp, args=args).start()
    yield server
    server.stop()


def _ingest(server: ServerProcess, run_id: str, **headers: str) -> httpx.Response:
    body = json.dumps(batch(run_id, range(3))).encode()
    return web.post(server.url + "/api/v1/ingest", content=body, headers=headers, timeout=30)


def _stored(server: ServerProcess, run_id: str) -> bool:
    return server.get(f"/api/v1/runs/{run_id}").status_code == 200


def _refusal(response: httpx.Response, status: int, *words: str) -> str:
    """The project's error body (JSON with `detail`), with `words` in its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    detail = response.json()["detail"]
    assert isinstance(detail, str) and "Traceback" not in response.text
    for word in words:
        assert word in detail
    return detail


# -- cross-origin writes -----------------------------------------------------------------------


def test_cross_origin_text_plain_ingest_is_refused_and_stores_nothing(
    open_server: ServerProcess,
) -> None:
    response = _ingest(open_server, "xo-plain", Origin=EVIL, **{"Content-Type": "text/plain"})
    _refusal(response, 403, "evil.example", "--cors-origin")
    assert not _stored(open_server, "xo-plain")


def test_cross_origin_json_ingest_is_refused_too(open_server: ServerProcess) -> None:
    response = _ingest(open_server, "xo-json", Origin=EVIL, **{"Content-Type": "application/json"})
    _refusal(response, 403, "--cors-origin")
    assert not _stored(open_server, "xo-json")


@pytest.mark.parametrize("site", ["cross-site", "same-site"])
def test_cross_site_fetch_without_origin_is_refused_and_stores_nothing(
    open_server: ServerProcess, site: str
) -> None:
    run_id = f"xs-{site}"
    response = _ingest(
        open_server, run_id, **{"Sec-Fetch-Site": site, "Content-Type": "text/plain"}
    )
    _refusal(response, 403, site)
    assert not _stored(open_server, run_id)


@pytest.mark.parametrize("origin", ["null", "not a url", "ftp://127.0.0.1"])
def test_an_origin_that_is_no_web_origin_is_refused(
    open_server: ServerProcess, origin: str
) -> None:
    response = _ingest(open_server, "xo-odd", Origin=origin, **{"Content-Type": "application/json"})
    _refusal(response, 403)
    assert not _stored(open_server, "xo-odd")


def test_a_page_on_another_port_of_the_same_host_is_another_origin(
    open_server: ServerProcess,
) -> None:
    response = _ingest(
        open_server, "xo-port", Origin="http://127.0.0.1:1", **{"Content-Type": "application/json"}
    )
    _refusal(response, 403)


@pytest.mark.parametrize("own", ["http://127.0.0.1:{port}", "http://localhost:{port}"])
def test_a_write_from_the_servers_own_pages_passes(open_server: ServerProcess, own: str) -> None:
    origin = own.format(port=open_server.port)
    response = _ingest(
        open_server,
        "own-origin",
        Origin=origin,
        Host=origin.split("//")[1],
        **{"Content-Type": "application/json", "Sec-Fetch-Site": "same-origin"},
    )
    assert response.status_code == 200, response.text
    assert _stored(open_server, "own-origin")


def test_scripts_without_origin_or_fetch_metadata_pass(open_server: ServerProcess) -> None:
    assert _ingest(open_server, "script", **{"Content-Type": "application/json"}).status_code == 200
    gzipped = open_server.post("/api/v1/ingest", batch("script-gz", range(2)), gzip_body=True)
    assert gzipped.status_code == 200, gzipped.text
    assert _stored(open_server, "script") and _stored(open_server, "script-gz")


def test_a_login_form_elsewhere_is_covered_by_the_origin_check_only(
    open_server: ServerProcess,
) -> None:
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    refused = web.post(
        open_server.url + "/login", content=b"user=a", headers={"Origin": EVIL, **form}
    )
    _refusal(refused, 403)
    own = web.post(
        open_server.url + "/login",
        content=b"user=a",
        headers={"Origin": open_server.url, **form},
    )
    assert own.status_code not in (403, 415)


# -- request bodies must be JSON ---------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None],
)
def test_a_write_to_the_api_that_is_not_json_gets_415(
    open_server: ServerProcess, content_type: str | None
) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    _refusal(_ingest(open_server, "not-json", **headers), 415, "application/json")
    assert not _stored(open_server, "not-json")


def test_json_with_a_charset_is_json(open_server: ServerProcess) -> None:
    response = _ingest(
        open_server, "charset", **{"Content-Type": "Application/JSON; charset=utf-8"}
    )
    assert response.status_code == 200, response.text


def test_a_dashboard_callback_that_is_not_json_gets_415(open_server: ServerProcess) -> None:
    response = web.post(
        open_server.url + "/_dash-update-component",
        content=b'{"output": "page.children"}',
        headers={"Content-Type": "text/plain"},
    )
    _refusal(response, 415)


def test_a_write_without_a_body_needs_no_content_type(open_server: ServerProcess) -> None:
    response = web.delete(open_server.url + "/api/v1/tokens/nope")
    assert response.status_code == 404, response.text


# -- Host header (DNS rebinding) ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/v1/runs", "/", "/_dash-layout", "/healthz"])
def test_a_foreign_host_is_refused_on_every_path(open_server: ServerProcess, path: str) -> None:
    response = web.get(open_server.url + path, headers={"Host": f"evil.example:{open_server.port}"})
    _refusal(response, 421, "evil.example", "--allowed-host")


def test_a_foreign_host_cannot_write(open_server: ServerProcess) -> None:
    response = _ingest(
        open_server,
        "rebound",
        Host=f"evil.example:{open_server.port}",
        Origin=f"http://evil.example:{open_server.port}",
        **{"Content-Type": "application/json"},
    )
    _refusal(response, 421)
    assert not _stored(open_server, "rebound")


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "LOCALHOST."])
@pytest.mark.parametrize("path", ["/api/v1/runs", "/"])
def test_loopback_names_pass_with_or_without_the_port(
    open_server: ServerProcess, host: str, path: str
) -> None:
    for value in (host, f"{host}:{open_server.port}"):
        response = web.get(open_server.url + path, headers={"Host": value})
        assert response.status_code == 200, f"{value}: {response.text}"


def test_configured_names_pass_and_others_do_not(named_server: ServerProcess) -> None:
    for host in ("monitor.lan", "10.1.2.3:8765", "monitor.example.com", "127.0.0.1"):
        response = web.get(named_server.url + "/api/v1/runs", headers={"Host": host})
        assert response.status_code == 200, f"{host}: {response.text}"
    refused = web.get(named_server.url + "/", headers={"Host": "other.lan"})
    _refusal(refused, 421, "other.lan")


# -- CORS --------------------------------------------------------------------------------------


def test_cors_is_off_by_default(open_server: ServerProcess) -> None:
    response = web.get(open_server.url + "/api/v1/runs", headers={"Origin": NOTEBOOK})
    assert "access-control-allow-origin" not in response.headers
    preflight = httpx.options(
        open_server.url + "/api/v1/ingest",
        headers={"Origin": NOTEBOOK, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def test_a_configured_origin_gets_cors_headers_and_may_write(named_server: ServerProcess) -> None:
    preflight = httpx.options(
        named_server.url + "/api/v1/ingest",
        headers={
            "Origin": NOTEBOOK,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, authorization",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == NOTEBOOK
    response = _ingest(
        named_server,
        "from-notebook",
        Origin=NOTEBOOK,
        **{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"},
    )
    assert response.status_code == 200, response.text
    assert response.headers["access-control-allow-origin"] == NOTEBOOK
    assert _stored(named_server, "from-notebook")


def test_an_unconfigured_origin_gets_no_cors_headers(named_server: ServerProcess) -> None:
    response = web.get(named_server.url + "/api/v1/runs", headers={"Origin": EVIL})
    assert "access-control-allow-origin" not in response.headers
    preflight = httpx.options(
        named_server.url + "/api/v1/ingest",
        headers={"Origin": EVIL, "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    _refusal(preflight, 403, "--cors-origin")
    _refusal(
        _ingest(named_server, "evil", Origin=EVIL, **{"Content-Type": "application/json"}), 403
    )
    assert not _stored(named_server, "evil")


def test_the_public_urls_origin_may_write_behind_a_tls_proxy(named_server: ServerProcess) -> None:
    response = _ingest(
        named_server,
        "proxied",
        Host="monitor.example.com",
        Origin="https://monitor.example.com",
        **{"Content-Type": "application/json"},
    )
    assert response.status_code == 200, response.text


# -- settings and parsing ----------------------------------------------------------------------


def test_allowed_hosts_follow_the_bind_address() -> None:
    loopback = allowed_hosts(Settings(host="127.0.0.1"))
    assert loopback == {"127.0.0.1", "localhost", "::1"}
    lan = allowed_hosts(Settings(host="10.0.0.5", allowed_hosts=["Monitor.LAN."]))
    assert lan == {"10.0.0.5", "monitor.lan"}
    assert allowed_hosts(Settings(host="0.0.0.0")) is None  # tokens are required there
    public = allowed_hosts(Settings(host="::", public_url="https://mm.example.com:8443/x"))
    assert public == {"mm.example.com", "127.0.0.1", "localhost", "::1"}


def test_trusted_origins_are_the_cors_origins_and_the_public_url() -> None:
    settings = Settings(
        cors_origins=["HTTPS://Notebook.Example:443"], public_url="http://mm.example.com:8080/x"
    )
    assert settings.cors_origins == ["https://notebook.example"]
    assert trusted_origins(settings) == {
        Origin("https", "notebook.example", None),
        Origin("http", "mm.example.com", 8080),
    }


def test_lists_come_from_the_environment_as_words_or_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MISMATCH_ALLOWED_HOSTS", "monitor.lan, 10.1.2.3")
    monkeypatch.setenv("MISMATCH_CORS_ORIGINS", '["http://a.example:8888"]')
    settings = Settings()
    assert settings.allowed_hosts == ["monitor.lan", "10.1.2.3"]
    assert settings.cors_origins == ["http://a.example:8888"]


@pytest.mark.parametrize(
    ("field", "value", "flag"),
    [
        ("allowed_hosts", ["http://monitor.lan"], "--allowed-host"),
        ("allowed_hosts", ["monitor.lan:8765"], "--allowed-host"),
        ("cors_origins", ["https://nb.example/path"], "--cors-origin"),
        ("cors_origins", ["nb.example"], "--cors-origin"),
        ("public_url", "monitor.example.com", "--public-url"),
    ],
)
def test_malformed_settings_fail_at_start_up_naming_the_flag(
    field: str, value: Any, flag: str
) -> None:
    with pytest.raises(ValueError, match=flag):
        Settings(**{field: value})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("localhost:8765", ("localhost", 8765)),
        ("[::1]:80", ("::1", 80)),
        ("[::1]", ("::1", None)),
        ("Example.COM.", ("example.com", None)),
        ("::1", None),
        ("a b", None),
        ("host:99999", None),
        ("evil.example@127.0.0.1", None),
    ],
)
def test_host_headers_are_parsed(value: str, expected: tuple[str, int | None] | None) -> None:
    assert split_host(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("https://a.example:443", Origin("https", "a.example", None)),
        ("http://[::1]:8765", Origin("http", "::1", 8765)),
        ("null", None),
        ("http://a.example/", None),
        ("http://user@a.example", None),
        ("file://x", None),
    ],
)
def test_origins_are_parsed(value: str, expected: Origin | None) -> None:
    assert parse_origin(value) == expected


def test_serve_refuses_a_malformed_cors_origin(server_factory: Any) -> None:
    server = server_factory(args=["--cors-origin", "notebook.example"], start=False)
    with pytest.raises(RuntimeError, match="--cors-origin"):
        server.start(timeout=60)
