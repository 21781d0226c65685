"""OutputCap keeps head and tail within its limit and says how much it dropped."""

from nexus.sandbox.output import OutputCap


def test_small_output_is_kept_whole():
    cap = OutputCap(100)
    cap.feed(b"hello ")
    cap.feed(b"world")
    assert cap.text() == "hello world"
    assert not cap.truncated


def test_large_output_keeps_head_and_tail_and_counts_the_rest():
    cap = OutputCap(20)
    data = bytes(range(65, 91)) * 1000  # 26_000 bytes, A..Z repeated
    for i in range(0, len(data), 7):  # odd chunk size: the boundaries must not matter
        cap.feed(data[i : i + 7])
    text = cap.text()
    assert cap.truncated
    assert text.startswith(data[:10].decode())
    assert text.endswith(data[-10:].decode())
    assert f"[... {len(data) - 20} bytes of output elided" in text


def test_memory_stays_bounded():
    cap = OutputCap(1000)
    chunk = b"x" * 4096
    for _ in range(10_000):  # 40 MB through
        cap.feed(chunk)
        assert len(cap._head) + len(cap._tail) <= 1000 + 2 * 4096
    assert cap.total == 40_960_000


def test_invalid_utf8_does_not_raise():
    cap = OutputCap(10)
    cap.feed(b"\xff\xfe" * 20)
    assert "elided" in cap.text()
