"""Webhook targets: the policy over every spelling of an address, and the pinned connection.

Address checks run with an injected resolver (no DNS). Connection tests use real HTTP(S) servers
on loopback addresses, allow-listed for the test, so what they assert is what reached a socket.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.alarms.delivering import outbound, safe_http
from server.alarms.delivering.outbound import TargetPolicy, UnsafeTarget, check_url
from server.alarms.delivering.safe_http import TrialResult, post, send_trial, webhook_client
from server.errors import Rejected

PUBLIC_V4 = "93.184.215.14"
PUBLIC_V6 = "2606:2800:21f:cb07:6820:80da:af6b:8b2c"
DEFAULT = TargetPolicy()


class Answers:
    """A resolver with fixed answers per name; it records every question."""

    def __init__(self, table: dict[str, Sequence[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        name = host.lower().removesuffix(".")
        if name not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, "unknown name")
        return list(self.table[name])


class Rebinding(Answers):
    """Answers `first` to the first question about a name and `then` to every later one."""

    def __init__(self, first: str, then: str) -> None:
        super().__init__({})
        self.first, self.then = first, then

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        return [self.first if len(self.calls) == 1 else self.then]


NAMES = Answers(
    {
        "localhost": ["127.0.0.1", "::1"],
        "hooks.internal": ["10.0.0.5"],
        "rebind.example": ["169.254.169.254"],
        "public.example": [PUBLIC_V4, PUBLIC_V6],
    }
)

# url, reason refused by default, an allow-list entry that opens it
OPENABLE = [
    ("http://127.0.0.1/", "loopback", "127.0.0.0/8"),
    ("http://127.1/", "loopback", "127.0.0.1"),
    ("http://0x7f.1/", "loopback", "127.0.0.1"),
    ("http://0177.1/", "loopback", "127.0.0.1"),
    ("http://2130706433/", "loopback", "127.0.0.1"),
    ("http://0x7f000001/", "loopback", "127.0.0.1"),
    ("http://127.0.0.1./", "loopback", "127.0.0.1"),
    ("http://localhost./", "loopback", "localhost"),
    ("http://[::1]:8080/", "loopback", "::1"),
    ("http://[::ffff:127.0.0.1]/", "loopback", "127.0.0.0/8"),
    ("http://[::ffff:7f00:1]/", "loopback", "127.0.0.0/8"),
    ("http://[::127.0.0.1]/", "reserved", "127.0.0.0/8"),
    ("http://[2002:7f00:1::]/", "loopback", "127.0.0.0/8"),
    ("http://[64:ff9b::7f00:1]/", "loopback", "127.0.0.0/8"),
    ("http://10.1.2.3/", "private", "10.0.0.0/8"),
    ("http://172.16.0.1/", "private", "172.16.0.0/12"),
    ("http://192.168.1.1:8080/x", "private", "192.168.0.0/16"),
    ("http://hooks.internal/", "private", "hooks.internal"),
    ("http://HOOKS.Internal./", "private", "hooks.internal"),
    ("https://hooks.internal:8443/h", "private", "10.0.0.0/8"),
    ("http://[fd12:3456::1]/", "private", "fc00::/7"),
    ("http://[64:ff9b::a00:1]/", "private", "10.0.0.0/8"),
    ("http://100.64.0.1/", "shared (carrier-grade NAT)", "100.64.0.0/10"),
    ("http://169.254.1.1/", "link-local", "169.254.0.0/16"),
    ("http://[fe80::1]/", "link-local", "fe80::/10"),
    ("http://224.0.0.1/", "multicast", "224.0.0.0/4"),
    ("http://[ff02::1]/", "multicast", "ff00::/8"),
    ("http://240.0.0.1/", "reserved", "240.0.0.0/4"),
    ("http://255.255.255.255/", "reserved", "255.255.255.255"),
    ("http://198.18.0.1/", "reserved", "198.18.0.0/15"),
    ("http://192.0.2.10/", "documentation", "192.0.2.0/24"),
    ("http://[2001:db8::1]/", "documentation", "2001:db8::/32"),
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "reserved", "2001::/32"),
    ("http://0.0.0.0/", "unspecified", "0.0.0.0/32"),
    ("http://0/", "unspecified", "0.0.0.0/32"),
    ("http://[::]/", "unspecified", "::/128"),
]

# url, reason: refused whatever the allow-list says
NEVER = [
    ("http://0177.0.0.1/", "malformed"),
    ("http://0251.0376.0251.0376/", "malformed"),
    ("http://%31%32%37.0.0.1/", "malformed"),
    ("http://foo.0x10/", "malformed"),
    ("http:///hook", "malformed"),
    ("http://[fe80::1%25eth0]/", "malformed"),
    ("http://127.0.0.1\\@good.com/", "malformed"),
    ("http://good.com@127.0.0.1/", "credentials"),
    ("http://user:pw@93.184.215.14/", "credentials"),
    ("ftp://93.184.215.14/", "scheme"),
    ("file:///etc/passwd", "scheme"),
    ("gopher://127.0.0.1:6379/_INFO", "scheme"),
    ("http://169.254.169.254/latest/meta-data/", "metadata"),
    ("http://169.254.169.254./", "metadata"),
    ("http://2852039166/", "metadata"),
    ("http://0xa9fea9fe/", "metadata"),
    ("http://0xa9.0xfe.0xa9.0xfe/", "metadata"),
    ("http://0251.254.43518/", "metadata"),
    ("http://169.254.43518/", "metadata"),
    ("http://[::ffff:169.254.169.254]/", "metadata"),
    ("http://[::ffff:a9fe:a9fe]/", "metadata"),
    ("http://[::169.254.169.254]/", "metadata"),
    ("http://[::a9fe:a9fe]/", "metadata"),
    ("http://[2002:a9fe:a9fe::]/", "metadata"),
    ("http://[64:ff9b::a9fe:a9fe]/", "metadata"),
    ("http://[fd00:ec2::254]/", "metadata"),
    ("http://100.100.100.200/", "metadata"),
    ("http://169.254.170.2/v2/credentials", "metadata"),
    ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
    ("http://metadata.google.internal./", "metadata"),
    ("http://METADATA.GOOGLE.INTERNAL/", "metadata"),
    ("http://metadata/", "metadata"),
    ("http://rebind.example/", "metadata"),
]
WIDE_OPEN = TargetPolicy.from_entries(
    ["0.0.0.0/0", "::/0", "rebind.example", "metadata.google.internal", "metadata"]
)


@pytest.mark.parametrize(("url", "reason"), [(u, r) for u, r, _ in OPENABLE] + NEVER)
def test_address_form_refused_by_default(url: str, reason: str) -> None:
    with pytest.raises(UnsafeTarget) as info:
        check_url(url, DEFAULT, resolver=NAMES)
    assert info.value.reason == reason


@pytest.mark.parametrize(("url", "entry"), [(u, e) for u, _, e in OPENABLE])
def test_address_form_allowed_when_allow_list_covers_it(url: str, entry: str) -> None:
    assert check_url(url, TargetPolicy.from_entries([entry]), resolver=NAMES)


@pytest.mark.parametrize(("url", "reason"), NEVER)
def test_metadata_and_malformed_refused_whatever_the_allow_list(url: str, reason: str) -> None:
    with pytest.raises(UnsafeTarget) as info:
        check_url(url, WIDE_OPEN, resolver=NAMES)
    assert info.value.reason == reason


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://127.0.0.1/", "10.0.0.0/8"),
        ("http://10.0.1.1/", "10.0.0.0/24"),
        ("http://[::1]/", "127.0.0.0/8"),
        ("http://hooks.internal/", "other.internal"),
        ("http://hooks.internal/", "internal"),
    ],
)
def test_allow_list_entry_opens_only_what_it_covers(url: str, entry: str) -> None:
    with pytest.raises(UnsafeTarget):
        check_url(url, TargetPolicy.from_entries([entry]), resolver=NAMES)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"http://{PUBLIC_V4}/hook", PUBLIC_V4),
        (f"https://{PUBLIC_V4}:8443/hook?x=1", PUBLIC_V4),
        (f"http://[{PUBLIC_V6}]/hook", PUBLIC_V6),
        (f"http://[::ffff:{PUBLIC_V4}]/hook", PUBLIC_V4),
        ("http://1572394766/", PUBLIC_V4),
        ("http://[2002:5db8:d70e::]/", "2002:5db8:d70e::"),
        ("http://[64:ff9b::5db8:d70e]/", "64:ff9b::5db8:d70e"),
    ],
)
def test_public_address_passes_without_resolving(url: str, expected: str) -> None:
    resolver = Answers({})
    assert check_url(url, DEFAULT, resolver=resolver) == [ipaddress.ip_address(expected)]
    assert resolver.calls == []


def test_public_host_name_passes_with_all_its_answers() -> None:
    addresses = check_url("https://public.example/hook", DEFAULT, resolver=NAMES)
    assert addresses == [ipaddress.ip_address(PUBLIC_V4), ipaddress.ip_address(PUBLIC_V6)]


@pytest.mark.parametrize("answers", [[PUBLIC_V4, "10.0.0.1"], ["10.0.0.1", PUBLIC_V4]])
def test_host_name_with_one_private_answer_is_refused(answers: list[str]) -> None:
    with pytest.raises(UnsafeTarget) as info:
        check_url("https://mixed.example/", DEFAULT, resolver=Answers({"mixed.example": answers}))
    assert info.value.reason == "private"
    assert "10.0.0.1" not in str(info.value)  # a resolved address is not echoed back


def test_unresolvable_host_is_refused_at_check_time() -> None:
    with pytest.raises(UnsafeTarget) as info:
        check_url("https://nowhere.example/", DEFAULT, resolver=NAMES)
    assert info.value.reason == "unresolvable"


def test_unsafe_target_is_a_rejection_with_reason_and_host() -> None:
    with pytest.raises(Rejected, match="loopback") as info:
        check_url("http://127.1:9/", DEFAULT)
    assert isinstance(info.value, UnsafeTarget)
    assert info.value.status_code == 422
    assert (info.value.reason, info.value.host) == ("loopback", "127.1")


@pytest.mark.parametrize(
    "entry", ["10.0.0.1/8", "127.1", "http://hooks.internal", "a b", "", "x..y"]
)
def test_policy_rejects_an_entry_that_is_neither_cidr_nor_host(entry: str) -> None:
    with pytest.raises(ValueError, match="--webhook-allow"):
        TargetPolicy.from_entries([entry])


def test_policy_reads_cidrs_and_normalises_host_names() -> None:
    policy = TargetPolicy.from_entries(["10.0.0.0/8", "127.0.0.1", " Hooks.Internal. "])
    assert policy.networks == (
        ipaddress.ip_network("10.0.0.0/8"),
        ipaddress.ip_network("127.0.0.1/32"),
    )
    assert policy.hosts == frozenset({"hooks.internal"})


def test_public_names_are_what_we_mean() -> None:
    assert set(outbound.__all__) == {
        "DEFAULT_POLICY",
        "METADATA_ADDRESSES",
        "METADATA_HOSTS",
        "IPAddress",
        "Resolver",
        "Target",
        "TargetPolicy",
        "UnsafeTarget",
        "check_url",
        "checked_addresses",
        "parse_target",
        "system_resolver",
    }
    assert set(safe_http.__all__) == {
        "DEFAULT_TIMEOUT_S",
        "MAX_BODY_BYTES",
        "TrialReason",
        "TrialResult",
        "post",
        "send_trial",
        "webhook_client",
    }


# --- the request: what httpx is asked to send -------------------------------------------------


class Captured:
    """A mock transport that keeps every request and answers 204."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(204)


def test_request_goes_to_the_first_checked_address_even_if_dns_changes() -> None:
    captured, resolver = Captured(), Rebinding(PUBLIC_V4, "127.0.0.1")
    with httpx.Client(transport=httpx.MockTransport(captured)) as client:
        post(
            client,
            "https://hooks.example/h",
            content=b"{}",
            headers={},
            policy=DEFAULT,
            resolver=resolver,
        )
    (request,) = captured.requests
    assert request.url.host == PUBLIC_V4
    assert request.headers["host"] == "hooks.example"
    assert request.extensions["sni_hostname"] == "hooks.example"
    assert resolver.calls == ["hooks.example"]


def test_ipv6_address_is_bracketed_and_host_header_keeps_the_port() -> None:
    captured = Captured()
    with httpx.Client(transport=httpx.MockTransport(captured)) as client:
        post(client, f"https://[{PUBLIC_V6}]:8443/h", content=b"", headers={}, policy=DEFAULT)
    (request,) = captured.requests
    assert str(request.url) == f"https://[{PUBLIC_V6}]:8443/h"
    assert request.headers["host"] == f"[{PUBLIC_V6}]:8443"
    assert "sni_hostname" not in request.extensions


def test_caller_cannot_override_host_or_keep_the_connection() -> None:
    captured = Captured()
    with httpx.Client(transport=httpx.MockTransport(captured)) as client:
        post(
            client,
            "http://public.example:8080/h",
            content=b"x",
            policy=DEFAULT,
            resolver=NAMES,
            headers={"Host": "evil.example", "connection": "keep-alive", "X-Sig": "s"},
        )
    (request,) = captured.requests
    assert request.headers["host"] == "public.example:8080"
    assert request.headers["connection"] == "close"
    assert request.headers["x-sig"] == "s"


def test_timeouts_are_finite_even_when_the_client_has_none() -> None:
    captured = Captured()
    with httpx.Client(transport=httpx.MockTransport(captured), timeout=None) as client:
        post(client, f"http://{PUBLIC_V4}/", content=b"", headers={}, policy=DEFAULT, timeout_s=3)
    timeouts = captured.requests[0].extensions["timeout"]
    assert set(timeouts) == {"connect", "read", "write", "pool"}
    assert all(value == 3 for value in timeouts.values())


class EndlessBody(httpx.SyncByteStream):
    """A response body of 1 KiB chunks, far more than the limit; counts the chunks pulled."""

    def __init__(self) -> None:
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        for _ in range(100 * safe_http.MAX_BODY_BYTES // 1024):
            self.pulled += 1
            yield b"x" * 1024


def test_response_body_is_read_only_up_to_the_limit() -> None:
    body = EndlessBody()
    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=body))
    with httpx.Client(transport=transport) as client:
        response = post(client, f"http://{PUBLIC_V4}/", content=b"", headers={}, policy=DEFAULT)
    assert len(response.content) == safe_http.MAX_BODY_BYTES
    assert body.pulled == safe_http.MAX_BODY_BYTES // 1024


def test_unresolvable_host_at_delivery_is_a_connect_error_and_sends_nothing() -> None:
    captured = Captured()
    with (
        httpx.Client(transport=httpx.MockTransport(captured)) as client,
        pytest.raises(httpx.ConnectError),
    ):
        post(
            client,
            "https://nowhere.example/",
            content=b"",
            headers={},
            policy=DEFAULT,
            resolver=NAMES,
        )
    assert captured.requests == []


# --- real servers on loopback ------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    local_ip: str
    peer_port: int
    host: str
    sni: str | None


class Endpoint:
    """A real HTTP(S)/1.1 server on `ip:port` that records each request and answers `status`."""

    def __init__(
        self,
        ip: str = "127.0.0.1",
        port: int = 0,
        *,
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"ok",
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.hits: list[Hit] = []
        self.sni: dict[int, str | None] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive unless the client asks otherwise

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", 0)))
                peer_port = self.client_address[1]
                outer.hits.append(
                    Hit(
                        self.connection.getsockname()[0],
                        peer_port,
                        self.headers["host"],
                        outer.sni.get(peer_port),
                    )
                )
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((ip, port), Handler)
        self.ip, self.port = ip, int(self.server.server_address[1])
        if tls is not None:
            tls.sni_callback = self._on_sni
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def _on_sni(self, sock: Any, name: str | None, _: ssl.SSLContext) -> None:
        self.sni[sock.getpeername()[1]] = name

    def url(self, host: str | None = None, scheme: str = "http") -> str:
        return f"{scheme}://{host or self.ip}:{self.port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoints() -> Iterator[list[Endpoint]]:
    started: list[Endpoint] = []
    yield started
    for endpoint in started:
        endpoint.close()


LOOPBACK_ONLY = TargetPolicy.from_entries(["127.0.0.1"])


def test_no_rebinding_the_connection_goes_to_the_checked_address(
    endpoints: list[Endpoint],
) -> None:
    """hooks.test answers 127.0.0.1 (allowed) when checked, 127.0.0.2 (not allowed) after."""
    checked = Endpoint("127.0.0.1")
    endpoints.append(checked)
    try:
        endpoints.append(Endpoint("127.0.0.2", checked.port))
    except OSError:
        pytest.skip("this system cannot bind 127.0.0.2 beside 127.0.0.1 on one port")
    rebinder = endpoints[1]
    resolver = Rebinding("127.0.0.1", "127.0.0.2")
    with webhook_client() as client:
        response = post(
            client,
            checked.url("hooks.test"),
            content=b"{}",
            headers={},
            policy=LOOPBACK_ONLY,
            resolver=resolver,
        )
        assert response.status_code == 200
        with pytest.raises(UnsafeTarget):  # the next message resolves again, and is refused
            post(
                client,
                checked.url("hooks.test"),
                content=b"{}",
                headers={},
                policy=LOOPBACK_ONLY,
                resolver=resolver,
            )
    assert [(h.local_ip, h.host) for h in checked.hits] == [
        ("127.0.0.1", f"hooks.test:{checked.port}")
    ]
    assert rebinder.hits == []
    assert resolver.calls == ["hooks.test", "hooks.test"]


def test_redirect_is_never_followed(endpoints: list[Endpoint]) -> None:
    elsewhere = Endpoint()
    endpoints.append(elsewhere)
    redirecting = Endpoint(status=302, headers=[("Location", elsewhere.url())])
    endpoints.append(redirecting)
    with httpx.Client(follow_redirects=True) as client:  # even a client that would follow
        response = post(client, redirecting.url(), content=b"{}", headers={}, policy=LOOPBACK_ONLY)
        trial = send_trial(
            client, redirecting.url(), content=b"{}", headers={}, policy=LOOPBACK_ONLY
        )
    assert response.status_code == 302
    assert trial == TrialResult(delivered=False, reason="not delivered")
    assert len(redirecting.hits) == 2
    assert elsewhere.hits == []


def test_next_checked_address_is_tried_when_the_first_refuses_the_connection(
    endpoints: list[Endpoint],
) -> None:
    try:
        live = Endpoint("127.0.0.2")
    except OSError:
        pytest.skip("this system cannot bind 127.0.0.2")
    endpoints.append(live)
    resolver = Answers({"hooks.test": ["127.0.0.1", "127.0.0.2"]})  # nothing on 127.0.0.1:port
    with webhook_client() as client:
        response = post(
            client,
            live.url("hooks.test"),
            content=b"{}",
            headers={},
            policy=TargetPolicy.from_entries(["127.0.0.0/8"]),
            resolver=resolver,
        )
    assert response.status_code == 200
    assert [h.local_ip for h in live.hits] == ["127.0.0.2"]


def test_trial_says_only_refused_before_any_connection(endpoints: list[Endpoint]) -> None:
    receiver = Endpoint()
    endpoints.append(receiver)
    with webhook_client() as client:
        result = send_trial(client, receiver.url(), content=b"", headers={}, policy=DEFAULT)
    assert result.as_dict() == {"delivered": False, "reason": "refused by policy"}
    assert receiver.hits == []


def test_trial_result_is_the_same_whatever_went_wrong(endpoints: list[Endpoint]) -> None:
    """Different statuses, bodies, a closed port and an unknown name all read the same."""
    failing = [Endpoint(status=s, body=b"internal secret") for s in (500, 404, 401, 301)]
    endpoints.extend(failing)
    closed = Endpoint()
    closed.close()
    urls = [e.url() for e in failing] + [closed.url(), "http://nowhere.example/"]
    with webhook_client() as client:
        results = [
            send_trial(client, url, content=b"", headers={}, policy=LOOPBACK_ONLY, resolver=NAMES)
            for url in urls
        ]
    assert results == [TrialResult(delivered=False, reason="not delivered")] * len(urls)
    assert all(e.hits for e in failing)


def test_trial_reports_delivered_on_2xx(endpoints: list[Endpoint]) -> None:
    receiver = Endpoint(status=204, body=b"")
    endpoints.append(receiver)
    with webhook_client() as client:
        result = send_trial(client, receiver.url(), content=b"", headers={}, policy=LOOPBACK_ONLY)
    assert result.as_dict() == {"delivered": True, "reason": "delivered"}


# --- TLS: the certificate is checked for the host name, not the address -------------------------


def tls_contexts(tmp_path: Path, names: list[str]) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a certificate for `names`, and a client context trusting its CA."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())

    def builder(subject: Any, public_key: Any) -> Any:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        )

    ca = (
        builder(ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    leaf = (
        builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]), key.public_key())
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (tmp_path / "ca.pem").write_bytes(ca.public_bytes(pem))
    (tmp_path / "leaf.pem").write_bytes(leaf.public_bytes(pem))
    (tmp_path / "leaf.key").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(tmp_path / "leaf.pem", tmp_path / "leaf.key")
    return server, ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))


def test_tls_verifies_the_host_name_and_sends_it_as_sni(
    endpoints: list[Endpoint], tmp_path: Path
) -> None:
    server_tls, client_tls = tls_contexts(tmp_path, ["hooks.test"])
    receiver = Endpoint(tls=server_tls)
    endpoints.append(receiver)
    resolver = Answers({"hooks.test": ["127.0.0.1"]})
    with httpx.Client(verify=client_tls) as client:
        response = post(
            client,
            receiver.url("hooks.test", "https"),
            content=b"{}",
            headers={},
            policy=LOOPBACK_ONLY,
            resolver=resolver,
        )
    assert response.status_code == 200
    assert [(h.local_ip, h.host, h.sni) for h in receiver.hits] == [
        ("127.0.0.1", f"hooks.test:{receiver.port}", "hooks.test")
    ]


def test_tls_refuses_a_certificate_for_another_name(
    endpoints: list[Endpoint], tmp_path: Path
) -> None:
    server_tls, client_tls = tls_contexts(tmp_path, ["other.test"])
    receiver = Endpoint(tls=server_tls)
    endpoints.append(receiver)
    resolver = Answers({"hooks.test": ["127.0.0.1"]})
    with httpx.Client(verify=client_tls) as client, pytest.raises(httpx.ConnectError):
        post(
            client,
            receiver.url("hooks.test", "https"),
            content=b"{}",
            headers={},
            policy=LOOPBACK_ONLY,
            resolver=resolver,
        )
    assert receiver.hits == []


def test_tls_connection_is_not_shared_between_host_names_on_one_address(
    endpoints: list[Endpoint], tmp_path: Path
) -> None:
    server_tls, client_tls = tls_contexts(tmp_path, ["a.test", "b.test"])
    receiver = Endpoint(tls=server_tls)
    endpoints.append(receiver)
    resolver = Answers({"a.test": ["127.0.0.1"], "b.test": ["127.0.0.1"]})
    with httpx.Client(verify=client_tls) as client:
        for name in ("a.test", "b.test"):
            post(
                client,
                receiver.url(name, "https"),
                content=b"{}",
                headers={},
                policy=LOOPBACK_ONLY,
                resolver=resolver,
            )
    assert [(h.host.split(":")[0], h.sni) for h in receiver.hits] == [
        ("a.test", "a.test"),
        ("b.test", "b.test"),
    ]
    assert receiver.hits[0].peer_port != receiver.hits[1].peer_port
