"""Bounded output capture: keep the first and last bytes of a stream, count what was dropped in between."""

from __future__ import annotations


class OutputCap:
    """Holds at most `limit` bytes (half head, half tail) however much is fed; memory stays O(limit)."""

    def __init__(self, limit: int) -> None:
        self.limit = max(0, limit)
        self.head_limit = self.limit // 2
        self.tail_limit = self.limit - self.head_limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data or self.tail_limit == 0:
            return
        self._tail += data
        if len(self._tail) > self.tail_limit:
            # Trim only when the buffer is well over: amortised O(1) per byte.
            if len(self._tail) > 2 * self.tail_limit or len(data) >= self.tail_limit:
                del self._tail[: len(self._tail) - self.tail_limit]

    @property
    def truncated(self) -> bool:
        return self.total > len(self._head) + min(len(self._tail), self.tail_limit)

    def text(self) -> str:
        tail = bytes(self._tail[-self.tail_limit :]) if self.tail_limit else b""
        kept = len(self._head) + len(tail)
        if self.total <= kept:
            return (bytes(self._head) + tail).decode("utf-8", errors="replace")
        elided = self.total - kept
        notice = f"\n[... {elided} bytes of output elided (kept first {len(self._head)} and last {len(tail)}) ...]\n"
        return bytes(self._head).decode("utf-8", errors="replace") + notice + tail.decode("utf-8", errors="replace")


def disk_limit_notice(disk_mb: int) -> str:
    """What a command killed for filling its sandbox's disk is told (docker and local say the same)."""
    return (f"[nexus: the command was killed: the sandbox's files passed its disk limit of {disk_mb} MB "
            "(SandboxLimits.disk_mb); delete large files before going on]")
