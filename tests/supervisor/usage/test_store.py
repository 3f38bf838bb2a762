"""The usage database and its writer thread: a locked file holds up the writer alone
(rows wait in its queue and are written once the file is free, and a gateway answers
meanwhile), and rows older than the retention are deleted."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import httpx
import openai
import pytest

from mlx_gateway.supervisor.gateway import gateway_of
from mlx_gateway.supervisor.usage.query import UsageQuery, summarize
from mlx_gateway.supervisor.usage.rows import UsageRow
from mlx_gateway.supervisor.usage.store import UsageStore, connect

from ..live import LiveGateway


def row(at: float, key: str = "app", tokens: int = 1) -> UsageRow:
    return UsageRow(at=at, key=key, model="m", kind="chat", input_tokens=tokens, status=200)


def total(path: Path) -> int:
    conn = connect(path)
    try:
        (count,) = conn.execute("SELECT COUNT(*) FROM usage").fetchone()
        return int(count)
    finally:
        conn.close()


async def test_rows_wait_for_a_locked_file_and_are_written_once_it_is_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "usage.sqlite3"
    store = UsageStore(path, retention_days=30)
    store.start()
    assert await store.flush()  # the file exists, with its table
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        for i in range(3):
            store.add(row(time.time(), tokens=i))  # returns at once: only queued
        assert not await store.flush(timeout=0.5)  # the writer waits for the lock
        assert store.written == 0
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert await store.flush()
    assert store.written == 3 and total(path) == 3
    await store.close()


async def test_closing_gives_up_rows_a_locked_file_refuses(tmp_path: Path) -> None:
    """A gateway that stops while its usage file is locked stops all the same."""
    path = tmp_path / "usage.sqlite3"
    store = UsageStore(path, retention_days=30)
    store.start()
    assert await store.flush()
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    try:
        store.add(row(time.time()))
        await store.close(timeout=0.5)
        assert store.written == 0
    finally:
        lock.execute("ROLLBACK")
        lock.close()


async def test_rows_past_the_retention_are_deleted_at_start(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    store = UsageStore(path, retention_days=365)
    store.start()
    now = time.time()
    for at in (now - 10 * 86400, now - 86400, now):
        store.add(row(at))
    await store.close()
    assert total(path) == 3
    store = UsageStore(path, retention_days=5)
    store.start()
    assert await store.flush()
    got = await store.read(lambda conn: summarize(conn, UsageQuery(0, now + 1)))
    assert got[0]["requests"] == 2
    await store.close()


@pytest.mark.slow
def test_a_gateway_answers_while_its_usage_file_is_locked(tmp_path: Path) -> None:
    """Answers do not wait for the usage file: while another program holds it
    locked, requests are answered and their rows are not yet written; once it is
    free, they are."""
    path = tmp_path / "usage.sqlite3"
    with LiveGateway({"model_path": "fake/ok"}, usage_path=str(path)) as gw:
        store = gateway_of(gw.app).recorder.usage
        url = f"{gw.url}/v1"
        with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=60) as sdk:
            messages = [{"role": "user", "content": "say first"}]
            sdk.chat.completions.create(model="fake/ok", messages=messages)  # type: ignore[arg-type]
            assert httpx.get(f"{gw.url}/v1/usage").json()["data"][0]["requests"] == 1
            lock = sqlite3.connect(path, isolation_level=None)
            lock.execute("BEGIN EXCLUSIVE")
            try:
                for text in ("one", "two", "three"):
                    messages = [{"role": "user", "content": f"say {text}"}]
                    reply = sdk.chat.completions.create(model="fake/ok", messages=messages)  # type: ignore[arg-type]
                    assert reply.choices[0].message.content == text
                assert store.written == 1  # answered, not yet written
            finally:
                lock.execute("ROLLBACK")
                lock.close()
            assert httpx.get(f"{gw.url}/v1/usage").json()["data"][0]["requests"] == 4
