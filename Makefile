# `make test` and `make demo` each set up .venv on a fresh machine (torch 2.13.0 CPU first, so that
# pip never resolves a multi-GB CUDA build), then run offline.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vocabshift-installed
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
# llama-cpp-python (dev extra) is built from its source distribution once; pip reuses the wheel from its cache for
# every later .venv. The build is CPU-only and of the library alone (no multimodal library; llama.cpp's tests, tools,
# examples and server stay off), with AVX2 code instead of -march=native, so that a cached wheel moved to another
# x86-64 runner does not stop on an unknown instruction.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
	-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF

.PHONY: setup lint docs test demo bench

setup: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The linter (with the pycodestyle rules as the format check) and the type checker first: both take seconds
# (mypy about a minute without its cache), so a lint error fails before the half-hour test run.
lint: setup
	$(VENV)/bin/ruff check src vocabshift_testing tests benchmarks examples scripts
	$(VENV)/bin/mypy

# The documentation builds (strict: a broken link, a missing results file or a docstring griffe cannot read fails)
# before the test run; tests/test_docs.py runs the code it shows.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

# Two test workers (pytest-xdist) of one thread each: a test spends much of its time outside torch's threads
# (subprocesses, tokenizers, Python), which the other worker's test fills; two threads each would oversubscribe.
test: lint docs
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n 2

demo: setup
	$(PY) examples/demo.py

bench: setup
	$(PY) benchmarks/bench_methods.py
	$(PY) benchmarks/bench_tokenizer_speed.py
	$(PY) benchmarks/bench_cpt_step.py
	$(PY) benchmarks/bench_probe.py
	$(PY) benchmarks/bench_lep_smollm2.py
	$(PY) benchmarks/bench_lep_stream.py
	$(PY) benchmarks/bench_wordvec_init.py
	$(PY) benchmarks/bench_wordvec_7b.py
