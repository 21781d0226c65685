"""KV-eviction quality and speed suites: how close each eviction policy stays to dense, and what it costs.

One file per suite (fidelity, retrieval, traces, speed); runner/report/plots turn records into JSON, markdown
and PNG under an output directory. Policies come from `nexus.runtime.REGISTRY`, so new ones are picked up.
"""
