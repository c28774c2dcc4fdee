# ratekeeper — run `make help` for the targets.
PYTHON ?= python
# maturin and cargo bench would otherwise share target/release and rebuild pyo3 on every switch.
export CARGO_TARGET_DIR_PY := target/py
# The editable install, cargo test and clippy build in one profile and folder (Cargo.toml's dev-py), so
# that make test compiles the dependencies once, not once per tool; pyo3 is told the same interpreter
# maturin uses, or its build script would run again and rebuild everything above it.
DEV_BUILD := CARGO_TARGET_DIR=$(CARGO_TARGET_DIR_PY) MATURIN_PEP517_ARGS="--profile dev-py"
DEV_CARGO := CARGO_TARGET_DIR=$(CARGO_TARGET_DIR_PY) PYO3_PYTHON="$$($(PYTHON) -c 'import sys; print(sys.executable)')"

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# WHEEL=dist/ratekeeper-*.whl: `make install` / `make test` install that built wheel instead of the source
# (what CI does, so the tests import the installed wheel; run it with a fresh venv's PYTHON).
WHEEL ?=
# The core is now _core.abi3.so; a _core.cpython-3XX-*.so left by an older build would be imported before it.
RM_STALE_CORE = rm -f python/ratekeeper/_core.cpython-*

.PHONY: install
install: ## install the package and its test dependencies (editable, dev-py build; WHEEL=path: that wheel)
ifdef WHEEL
	$(PYTHON) -m pip install --quiet '$(WHEEL)[test]'
else
	$(PYTHON) -m pip install --quiet 'maturin>=1.9.4,<2'
	$(RM_STALE_CORE)
	$(DEV_BUILD) $(PYTHON) -m pip install --quiet --no-build-isolation -e '.[test]'
endif

# On Linux the wheel is manylinux2014 (glibc 2.17: Debian 8, Ubuntu 14.04, RHEL 7, Amazon Linux 2 and
# newer): zig links it against that glibc's symbols, whatever this machine's glibc is. Its own target
# directory: zig's C compiler would otherwise rebuild the C parts of the editable install's.
ifeq ($(shell uname -s),Linux)
WHEEL_BUILD := --zig --compatibility manylinux2014
# The instrumented build (PGO, below) is built the same way, so that its symbols are the final build's (the
# profile finds functions by name); .ci/pgo_link.sh hands zig's cc the profiler runtime in a form it reads.
INSTRUMENTED_LINK := -Clinker=$(CURDIR)/.ci/pgo_link.sh
WHEEL_TOOLS := 'maturin[zig]>=1.9.4,<2' auditwheel
else
WHEEL_BUILD :=
INSTRUMENTED_LINK :=
WHEEL_TOOLS := 'maturin>=1.9.4,<2'
endif

# The wheel's core is profile-guided (PGO): built once instrumented, installed into a venv of its own with the
# clients and frameworks .ci/pgo_train.py drives, run on that workload, then built again from the counts, which
# lay out and inline the paths run hot (callgrind, against the same wheel without: an httpx call's added
# instruction-cache misses 37 % fewer, a decision 12 to 20 % fewer instructions). It needs rustup's llvm-tools (for
# llvm-profdata, added here); PGO=0 builds without (one build, no workload). The profile is named by its hash,
# so that cargo rebuilds the core whenever the counts change, and only then.
PGO ?= 1
PGO_DIR := $(CURDIR)/target/pgo
PGO_EXTRAS := httpx,requests,aiohttp,flask,django,fastapi
export HASH16 := import hashlib, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16])
LLVM_PROFDATA = "$$(rustc --print sysroot)/lib/rustlib/$$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"

.PHONY: wheel
wheel: ## build the abi3 wheel (one per platform, for every CPython >= 3.10; Linux: manylinux2014; PGO) into dist/
	$(PYTHON) -m pip install --quiet $(WHEEL_TOOLS)
ifeq ($(PGO),0)
	CARGO_TARGET_DIR=target/wheel $(PYTHON) -m maturin build --release $(WHEEL_BUILD) --out dist
else
	rustup component add llvm-tools
	rm -rf $(PGO_DIR)/counts $(PGO_DIR)/dist $(PGO_DIR)/venv $(PGO_DIR)/*.profdata
	RUSTFLAGS="$$RUSTFLAGS -Cprofile-generate=$(PGO_DIR)/counts $(INSTRUMENTED_LINK)" \
		CARGO_TARGET_DIR=target/wheel-instrumented $(PYTHON) -m maturin build --release $(WHEEL_BUILD) --out $(PGO_DIR)/dist
	$(PYTHON) -m venv $(PGO_DIR)/venv
	$(PGO_DIR)/venv/bin/python -m pip install --quiet "$$(ls $(PGO_DIR)/dist/ratekeeper-*.whl)[$(PGO_EXTRAS)]"
	$(PGO_DIR)/venv/bin/python .ci/pgo_train.py
	$(LLVM_PROFDATA) merge -o $(PGO_DIR)/merged.profdata $(PGO_DIR)/counts
	profile="$(PGO_DIR)/core-$$($(PYTHON) -c "$$HASH16" $(PGO_DIR)/merged.profdata).profdata" \
		&& mv $(PGO_DIR)/merged.profdata "$$profile" \
		&& RUSTFLAGS="$$RUSTFLAGS -Cprofile-use=$$profile" CARGO_TARGET_DIR=target/wheel \
		$(PYTHON) -m maturin build --release $(WHEEL_BUILD) --out dist
endif
	for wheel in dist/ratekeeper-*.whl; do $(PYTHON) .ci/check_wheel.py "$$wheel" || exit 1; done

.PHONY: build-dev
build-dev: ## rebuild the extension after a Rust change
	$(RM_STALE_CORE)
	$(DEV_BUILD) $(PYTHON) -m pip install --quiet --no-build-isolation --no-deps -e .

.PHONY: lint
lint: ## cargo fmt, clippy, ruff, mypy --strict, stubtest
	cargo fmt --check
	$(DEV_CARGO) cargo clippy --profile dev-py --all-targets --features bench -- -D warnings
	$(PYTHON) -m ruff check python tests benches
	$(PYTHON) -m ruff format --check python tests benches
	$(PYTHON) -m mypy --strict
	$(PYTHON) -m mypy.stubtest ratekeeper._core

.PHONY: test
# Property tests draw 50 examples each here, 300 in CI (.ci/run sets HYPOTHESIS_PROFILE=ci).
test: install lint ## install, lint, then every test: cargo test, pytest and the docs site's strict build
	$(DEV_CARGO) cargo test --profile dev-py
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-fast} $(PYTHON) -m pytest -q -n auto --maxprocesses 4 -m "not alone"
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-fast} $(PYTHON) -m pytest -q -m alone
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict --quiet

# pyproject's docs extra, installed alone: `pip install -e '.[docs]'` would compile the core again, and
# the site reads the sources, not the built module (tests/docs/test_api_reference.py checks they agree).
DOCS_DEPS := 'mkdocs-material>=9.5' 'mkdocstrings-python>=1.10' 'ruff>=0.6'

.PHONY: docs
docs: ## install what the site needs, then build it into site/ (mkdocs, warnings are errors)
	$(PYTHON) -m pip install --quiet $(DOCS_DEPS)
	NO_MKDOCS_2_WARNING=1 $(PYTHON) -m mkdocs build --strict

.PHONY: demo
demo: ## the demo
	$(PYTHON) -m ratekeeper demo

# The newest wheel in dist/ (make wheel's); pip keeps an installed version it is given again, hence the first
# install forced (the wheel alone), the second for the bench extra's libraries.
BENCH_WHEEL = "$$(ls -t dist/ratekeeper-*.whl | head -n 1)"
define BENCH_INSTALL
$(MAKE) wheel
$(PYTHON) -m pip install --quiet --force-reinstall --no-deps $(BENCH_WHEEL)
$(PYTHON) -m pip install --quiet $(BENCH_WHEEL)'[bench]'
endef

.PHONY: bench
# Every step of benches/run.py in turn (each writes benches/results/<step>.json with the machine it ran on),
# then benches/render.py rewrites every figure of docs/benchmarks.md and the README from those files. The
# Python steps measure what users install: the wheel make wheel builds (profile-guided; PGO=0: without),
# installed over the editable install with the bench extra; make install (and so make test) puts the
# editable install back. QUICK=1: the shortest settings, into a temporary folder, pages rendered there as
# copies: the committed results and pages are left alone, and the core is not rebuilt.
bench: ## build and install the wheel, every benchmark, then every figure of the docs (about 35 min; QUICK=1: smoke run)
ifdef QUICK
	$(PYTHON) -m pip install --quiet $$($(PYTHON) benches/run.py --requirements)
	$(PYTHON) benches/run.py --quick
else
	$(BENCH_INSTALL)
	$(PYTHON) benches/run.py
endif

.PHONY: bench-web
bench-web: ## make bench's web steps only (in process, counted, wrk; needs wrk, valgrind), then the pages
	$(BENCH_INSTALL)
	$(PYTHON) benches/run.py --only web_inprocess,django_inprocess,web_instructions,http_bench,http_profiles

.PHONY: bench-redis
bench-redis: ## make bench's Redis step only (needs redis-server), then the pages
	$(BENCH_INSTALL)
	$(PYTHON) benches/run.py --only redis

.PHONY: format
format: ## apply cargo fmt and ruff format
	cargo fmt
	$(PYTHON) -m ruff format python tests benches
	$(PYTHON) -m ruff check --fix python tests benches
