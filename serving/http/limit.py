"""The limit on requests in flight that both HTTP services apply; no web framework is imported here, so
the query API's search service (:mod:`serving.api.service`) holds one.

>>> limit = InflightLimit(1, retry_after_s=2)
>>> with limit:
...     limit.acquire()
Traceback (most recent call last):
...
serving.http.limit.Overloaded: 1 requests in flight; retry later
>>> limit.count
0
"""

from __future__ import annotations

from types import TracebackType

from core.errors import ProReError


class Overloaded(ProReError):
    """A service refuses a request for now: HTTP 429 with ``Retry-After`` (:func:`serving.http.app.
    overloaded_response`). ``reason`` names the limit it hit, as the services' rejection metrics label it
    (``concurrency``: requests in flight; ``queue_full``: the reward service's queue)."""

    code = "overloaded"
    retryable = True

    def __init__(self, reason: str, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class InflightLimit:
    """Requests in flight, at most ``maximum`` at once (0 refuses every one).

    :meth:`acquire` takes a slot or raises :class:`Overloaded` (reason ``concurrency``), :meth:`release`
    gives it back, and ``with limit:`` does both. It does not block or lock: one event loop owns it, and
    no ``await`` comes between a check and its count.
    """

    def __init__(self, maximum: int, retry_after_s: int) -> None:
        self.maximum = maximum
        self.retry_after_s = retry_after_s
        self._count = 0

    @property
    def count(self) -> int:
        """Requests holding a slot now."""
        return self._count

    def acquire(self) -> None:
        if self._count >= self.maximum:
            raise Overloaded(
                "concurrency", f"{self._count} requests in flight; retry later", self.retry_after_s
            )
        self._count += 1

    def release(self) -> None:
        self._count -= 1

    def __enter__(self) -> InflightLimit:
        self.acquire()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
