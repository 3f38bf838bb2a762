"""One live connection to an MCP server: the SDK's :class:`mcp.Client` entered and
exited by a task of its own (the SDK's transports are anyio task groups, which must
be left by the task that entered them), so that calls from any request's task share
it while it lives.

The connection ends when told to (:meth:`Connection.stop`), when it has been idle
for ``idle_timeout`` seconds with no call in flight, or when the server goes away
(the process exits, the HTTP server stops answering); calls in flight then fail
at once instead of waiting for their timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import anyio
import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CONNECTION_CLOSED, INTERNAL_ERROR, Implementation

from mlx_gateway.supervisor.config.tools import McpServerConfig

log = logging.getLogger("mlx_gateway.supervisor.tools")

CLIENT_INFO = Implementation(name="mlx-gateway", version="0.1.0")
HTTP_CONNECT_TIMEOUT = 10.0
STOP_WAIT = 10.0
"""Seconds a stopping connection may take (the SDK's stdio shutdown: stdin closed,
then SIGTERM, then SIGKILL, each bounded) before its task is cancelled."""


class Connection:
    """The SDK client of one server, held open by a task of its own.

    ``busy`` is how many calls use it now, ``last_used`` when the last one ended
    (``loop.time()``); both are kept by :class:`.mcp.McpServer`.
    """

    def __init__(self, label: str, config: McpServerConfig, idle_timeout: float) -> None:
        self.label = label
        self.config = config
        self.idle_timeout = idle_timeout
        loop = asyncio.get_running_loop()
        self.busy = 0
        self.last_used = loop.time()
        self.closing = False
        """Set once it will take no more calls (idle, stopped or gone)."""
        self.http_status: int | None = None
        """The last HTTP error status a streamable HTTP server answered."""
        self.error: BaseException | None = None
        """Why it ended, when it was not asked to."""
        self._ready: asyncio.Future[Client] = loop.create_future()
        self._stop = asyncio.Event()
        self._nudge = asyncio.Event()
        self.ended = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name=f"mcp {label}")

    # ----------------------------------------------------------------- the task

    async def _run(self) -> None:
        try:
            async with self._client() as client:
                if not self._ready.done():
                    self._ready.set_result(client)
                    log.info("MCP server %r: connected (%s)", self.label, self._target())
                await self._hold()
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.set_exception(TimeoutError("the server did not start in time"))
            raise
        except BaseException as exc:  # the server failed, or went away
            self.error = exc = self._explained(_leaf(exc))
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:
                log.warning("MCP server %r: connection lost: %s", self.label, describe(exc))
        finally:
            self.closing = True
            self.ended.set()
            if self._ready.done() and not self._ready.cancelled():
                self._ready.exception()  # retrieved: no "never retrieved" warning

    @contextlib.asynccontextmanager
    async def _client(self) -> AsyncIterator[Client]:
        """The SDK's client over stdio or streamable HTTP, entered."""
        config = self.config
        common: dict[str, Any] = {"client_info": CLIENT_INFO, "cache": None}
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command, args=config.args, env=config.env or None, cwd=config.cwd
            )
            async with Client(params, **common) as client:
                yield client
            return
        assert config.url is not None
        timeout = httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=None)  # calls have their own
        hooks = {"response": [self._note_status]}
        async with httpx2.AsyncClient(
            headers=config.headers, timeout=timeout, event_hooks=hooks
        ) as http:
            transport: AbstractAsyncContextManager[Any] = streamable_http_client(
                config.url, http_client=http
            )
            async with Client(transport, **common) as client:
                yield client

    async def _note_status(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.http_status = response.status_code

    def _explained(self, exc: BaseException) -> BaseException:
        """The SDK's stand-in for an HTTP error status, with the status it stands for."""
        stand_in = isinstance(exc, MCPError) and exc.message == "Server returned an error response"
        if stand_in and self.http_status is not None:
            return MCPError(INTERNAL_ERROR, f"the server answered HTTP {self.http_status}")
        return exc

    async def _hold(self) -> None:
        """Return when stopped, or once idle for ``idle_timeout`` seconds."""
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            if self.idle_timeout <= 0 or self.busy:
                wait: float | None = None if self.idle_timeout <= 0 else self.idle_timeout
            else:
                wait = self.last_used + self.idle_timeout - loop.time()
                if wait <= 0:
                    self.closing = True
                    log.info("MCP server %r: stopped after %gs idle", self.label, self.idle_timeout)
                    return
            self._nudge.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), wait)

    def _target(self) -> str:
        if self.config.command is not None:
            return " ".join([self.config.command, *self.config.args])
        return str(self.config.url)

    # ----------------------------------------------------------------- the users

    async def client(self, timeout: float) -> Client:
        """The connected client, once the server answered its handshake; a start that
        takes longer than ``timeout`` seconds is given up (and the connection ended)."""
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            self.closing = True
            self._task.cancel()
            raise

    def wake(self) -> None:
        """A call ended: the idle clock starts again (its wait is computed anew)."""
        self._nudge.set()

    async def run(self, call: Callable[[], Any], timeout: float) -> Any:
        """``await call()``, given up when the connection ends or ``timeout`` passes."""
        task = asyncio.ensure_future(call())
        ended = asyncio.ensure_future(self.ended.wait())
        try:
            done, _ = await asyncio.wait(
                {task, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ended.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if task in done:
            try:
                return task.result()
            except Exception as exc:
                if _lost(exc):  # the next use starts a new connection
                    self.error = exc
                    self.closing = True
                    self._stop.set()
                    self._nudge.set()
                explained = self._explained(exc)
                if explained is exc:
                    raise
                raise explained from exc
        if ended in done:
            why = describe(self.error) if self.error is not None else "it was stopped"
            raise ConnectionError(f"the connection to the server ended: {why}")
        raise TimeoutError

    async def stop(self) -> None:
        """End the connection (the stdio server's process with it)."""
        self.closing = True
        self._stop.set()
        self._nudge.set()
        try:
            await asyncio.wait_for(asyncio.shield(self._task), STOP_WAIT)
        except TimeoutError:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        except BaseException:  # its failure was recorded by _run
            pass


def _lost(exc: Exception) -> bool:
    """Whether ``exc`` says the connection is gone (not that one request failed)."""
    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(
        exc,
        OSError
        | httpx2.TransportError
        | anyio.ClosedResourceError
        | anyio.BrokenResourceError
        | anyio.EndOfStream,
    )


def _leaf(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap failures)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """A failure in a few words: the first leaf of an exception group, its type
    when it has no message."""
    exc = _leaf(exc)
    text = str(exc).strip()
    if isinstance(exc, TimeoutError) and not text:
        return "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
