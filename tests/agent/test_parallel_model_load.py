"""`eval swebench run --workers K` runs agents as threads of one process. Loading the model from two threads at
once used to leave weights on the meta device (every instance crashed); now one thread loads and all share it."""

from __future__ import annotations

import threading

from nexus.agent.backends import local
from nexus.agent.backends.local import StreamSpec, load_cached


def test_concurrent_loads_share_one_working_model(monkeypatch):
    monkeypatch.setattr(local, "_MODELS", {})
    results, errors = [], []
    start = threading.Barrier(3)

    def load():
        start.wait()
        try:
            results.append(load_cached(StreamSpec(model="embedded", device="cpu")))
        except Exception as exc:  # noqa: BLE001 - the test reports whatever a thread raised
            errors.append(repr(exc))

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 3 and all(r[0] is results[0][0] for r in results)
    model = results[0][0]
    assert not any(p.is_meta for p in model.parameters())
