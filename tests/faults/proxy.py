"""A small TCP proxy of the fault tests: it sits between the collectors and a real server on
127.0.0.1 and misbehaves on purpose.

Every connection is handled in the mode the proxy is in when it is accepted:

- `pass`: bytes go both ways untouched;
- `slow`: both directions trickle, `SLOW_CHUNK` bytes every `SLOW_PERIOD` seconds;
- `stall`: the connection is accepted and held, nothing forwarded, until `release()` (or
  `STALL_LIMIT`), then closed;
- `reset`: the connection is closed at once with a TCP reset;
- `truncate`: alternately the request is cut half-way (the server never sees it whole) or the
  answer is cut after a few bytes (the server stored the batch, the client does not know it).

The proxy is bounded: at most `max_connections` at once (more are reset and counted), each
connection at most `CONNECTION_LIMIT` seconds. It runs its own asyncio loop in a daemon thread and
counts what it did in `counts` (accepted, forwarded, slowed, stalled, reset, truncated,
upstream_refused, over_limit). The upstream port is asked for each connection, so a server
restarted on another port is followed.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable

MODES = ("pass", "slow", "stall", "reset", "truncate")
SLOW_CHUNK = 512
SLOW_PERIOD = 0.01
STALL_LIMIT = 30.0
CONNECTION_LIMIT = 60.0
ANSWER_CUTS = (0, 5, 40)  # bytes of the answer let through: none, a torn status line, headers


class FaultProxy:
    def __init__(self, upstream_port: Callable[[], int], *, max_connections: int = 128) -> None:
        self.upstream_port = upstream_port
        self.max_connections = max_connections
        self.mode = "pass"
        self.counts: Counter[str] = Counter()
        self.port = 0
        self._open = 0
        self._loop = asyncio.new_event_loop()
        self._release: asyncio.Event | None = None
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._lock = threading.Lock()

    # -- control, from the test's thread ---------------------------------------------------
    def start(self) -> FaultProxy:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def set_mode(self, mode: str) -> None:
        assert mode in MODES, mode
        if self.mode == "stall" and mode != "stall":
            self.release()
        self.mode = mode

    def release(self) -> None:
        """Let the stalled connections go (they are closed, unanswered)."""

        def swap() -> None:
            if self._release is not None:
                self._release.set()
            self._release = asyncio.Event()

        self._loop.call_soon_threadsafe(swap)

    def count(self, name: str) -> int:
        with self._lock:
            return self.counts[name]

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            if self._release is not None:
                self._release.set()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    # -- the loop ----------------------------------------------------------------------------
    def _bump(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1

    async def _listen(self) -> None:
        self._release = asyncio.Event()
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        self._bump("accepted")
        if self._open >= self.max_connections:
            self._bump("over_limit")
            _reset(writer)
            return
        self._open += 1
        try:
            await asyncio.wait_for(self._serve(mode, reader, writer), CONNECTION_LIMIT)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            pass
        finally:
            self._open -= 1
            _close(writer)

    async def _serve(
        self, mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if mode == "reset":
            self._bump("reset")
            _reset(writer)
            return
        if mode == "stall":
            self._bump("stalled")
            release = self._release
            assert release is not None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(release.wait(), STALL_LIMIT)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port())
        except OSError:
            self._bump("upstream_refused")
            _reset(writer)  # what a client meets when the server is down: a refusal
            return
        try:
            await self._forward(mode, reader, writer, up_reader, up_writer)
        finally:
            _close(up_writer)

    async def _forward(
        self,
        mode: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        slow = mode == "slow"
        if slow:
            self._bump("slowed")
        cut_request: int | None = None
        cut_answer: int | None = None
        if mode == "truncate":
            self._bump("truncated")
            turn = self.count("truncated")
            if turn % 2:
                cut_answer = ANSWER_CUTS[(turn // 2) % len(ANSWER_CUTS)]
            else:
                cut_request = -1  # half of the first read
        upward = asyncio.ensure_future(_pipe(reader, up_writer, slow=slow, cut=cut_request))
        downward = asyncio.ensure_future(_pipe(up_reader, writer, slow=slow, cut=cut_answer))
        done, pending = await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_COMPLETED)
        if downward not in done and cut_request is None:
            await downward  # the request is through: the answer still comes
        else:
            for task in pending:
                task.cancel()
        self._bump("forwarded")
        for task in (upward, downward):
            if not task.done():
                task.cancel()


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, slow: bool, cut: int | None
) -> None:
    """Copy until EOF; with `cut`, that many bytes of the first chunk (-1: half), then stop."""
    with contextlib.suppress(OSError):  # a peer that reset: this direction is over
        while True:
            data = await reader.read(65536)
            if not data:
                writer.write_eof()
                return
            if cut is not None:
                writer.write(data[: len(data) // 2 if cut < 0 else cut])
                await writer.drain()
                return
            if slow:
                for start in range(0, len(data), SLOW_CHUNK):
                    writer.write(data[start : start + SLOW_CHUNK])
                    await writer.drain()
                    await asyncio.sleep(SLOW_PERIOD)  # the fault itself: a slow link
            else:
                writer.write(data)
                await writer.drain()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0) instead of an orderly FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        writer.close()
