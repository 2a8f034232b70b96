"""The suite's one way to wait for something to happen: poll a condition until a deadline.

A test never sleeps a fixed time hoping that something has happened by then; it names the
condition it waits for, and if the deadline passes the failure says what was awaited (and,
with `state`, what was seen instead). `wait_until` is for synchronous code (Playwright's sync
API, process start-up), `await_until` for asyncio code; both poll the same way.

Fixed sleeps that remain in the suite are the subject of a test (a measurement window, a quiet
window in which something must NOT happen) or pacing (a media clock, a keepalive period), and
say so in a comment.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional


class WaitTimeout(AssertionError, TimeoutError):
    """A condition was not met in time. Both an AssertionError (pytest shows it as a test
    failure) and a TimeoutError (what callers of the older helpers caught)."""


def _timed_out(what: str, timeout: float, state: Optional[Callable[[], Any]]) -> WaitTimeout:
    msg = f"timed out after {timeout:g}s waiting for {what}"
    if state is not None:
        try:
            msg += f" (last seen: {state()!r})"
        except Exception as e:  # noqa: BLE001 - the report must not hide the timeout
            msg += f" (state unavailable: {e!r})"
    return WaitTimeout(msg)


def wait_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.2,
               state: Optional[Callable[[], Any]] = None) -> Any:
    """Polls pred() every `interval` s until it returns a truthy value, which is returned;
    after `timeout` s raises WaitTimeout naming `what` (and `state()`, if given)."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, state)
        time.sleep(interval)


async def await_until(pred: Callable[[], Any], timeout: float, what: str, interval: float = 0.05,
                      state: Optional[Callable[[], Any]] = None) -> Any:
    """wait_until for asyncio: pred may be a plain function or return an awaitable."""
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, state)
        await asyncio.sleep(interval)
