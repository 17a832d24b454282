# Setup and everyday commands. `make demo` and `make test` are all a new checkout needs.
VENV   ?= .venv
PY     := $(VENV)/bin/python
# Python packages the venv gets; keep in step with pyproject.toml ([project] dependencies, [test]).
PY_DEPS := maturin "pydantic>=2" "polars>=1.0" pyarrow numpy "matplotlib>=3.7" typer rich "dask[distributed]" pytest hypothesis mypy

.PHONY: venv build core demo test bench clean browser tshark

venv: $(VENV)/.deps

$(VENV)/.deps: Makefile pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(PY_DEPS)
	touch $@

# cargo rebuilds only what changed; maturin then reinstalls the extension into the venv. Every
# release build (the extension, the link emulator, the benchmark) takes the simulator's profile
# (PGO_FLAGS, below) when there is one; `build` trains it first (pgo-profile), `core` builds with
# the profile there is, or none.
build: pgo-profile core

core: venv kernel-deps bpf
	VIRTUAL_ENV=$(abspath $(VENV)) RUSTFLAGS="$(PGO_FLAGS)" $(VENV)/bin/maturin develop --release --quiet
	@# the package's bytecode, so that commands start without compiling it, also where
	@# PYTHONDONTWRITEBYTECODE keeps Python from writing it (a newer source is compiled anew)
	$(PY) -m compileall -q python/cctestbed > /dev/null
	RUSTFLAGS="$(PGO_FLAGS)" cargo build --release --quiet -p cctestbed-linkemu

# Profile-guided optimisation of the simulator core. An instrumented build of the extension
# (target/pgo/gen) runs bench/pgo_train.py, a few seconds of trials (the examples, Table 1's
# operating points, 10 and 100 Gbit/s, the BPF port of BBR), and the counts it leaves
# (target/pgo/core.profdata, redone when that build or the training changed) tell the compiler
# which branches the simulator takes, so it lays out and inlines for them: the same outputs bit
# for bit, 8-16 % less time per packet (docs/validation.md, Speed; the counts differ a little
# from one training run to the next, so the build is not byte for byte reproducible, though its
# outputs are). llvm-profdata, which merges the counts, comes with rustup's llvm-tools
# component, added here when missing; without it (no rustup) the core is built without a
# profile, and says so.
PGO         := target/pgo
PGO_PROFILE := $(PGO)/core.profdata
PGO_FLAGS    = $$(test -e $(PGO_PROFILE) && echo -Cprofile-use=$(abspath $(PGO_PROFILE)))
.PHONY: pgo-profile
pgo-profile: venv kernel-deps bpf
	@profdata="$$(rustc --print sysroot)/lib/rustlib/$$(rustc -vV | sed -n 's/^host: //p')/bin/llvm-profdata"; \
	[ -x "$$profdata" ] || rustup component add llvm-tools >/dev/null 2>&1 || true; \
	if [ ! -x "$$profdata" ]; then \
	  echo "llvm-profdata not found (rustup component add llvm-tools): the simulator core is built without a profile"; \
	  rm -f $(PGO_PROFILE); exit 0; \
	fi; \
	set -e; \
	CARGO_TARGET_DIR=$(PGO)/gen \
	  RUSTFLAGS="-Cprofile-generate=$(abspath $(PGO))/raw" $(VENV)/bin/maturin build --release --quiet -o $(PGO)/wheels > /dev/null; \
	if [ ! -e $(PGO_PROFILE) ] || [ ! -e $(PGO)/trained ] || \
	   [ $(PGO)/gen/release/lib_core.so -nt $(PGO)/trained ] || [ bench/pgo_train.py -nt $(PGO)/trained ]; then \
	  rm -rf $(PGO)/raw; \
	  $(PY) bench/pgo_train.py $(PGO)/gen/release/lib_core.so; \
	  "$$profdata" merge -o $(PGO_PROFILE) $(PGO)/raw; \
	  touch $(PGO)/trained; \
	fi

# The BPF congestion controls (bpf/*.bpf.c: the BPF port of BBR with the thesis' variants, the
# README's Reno), compiled against a vmlinux.h that bpftool generates from the running kernel's
# BTF. Without clang, bpftool, libbpf-dev or kernel BTF they are not built, and the kernel tests
# that need them are skipped and say why.
BPF_OUT  := target/bpf
BPF_OBJS := $(patsubst bpf/%.bpf.c,$(BPF_OUT)/%.bpf.o,$(wildcard bpf/*.bpf.c))
.PHONY: bpf
bpf:
	@if command -v clang >/dev/null 2>&1 && command -v bpftool >/dev/null 2>&1 && \
	    [ -e /usr/include/bpf/bpf_helpers.h ] && [ -r /sys/kernel/btf/vmlinux ]; then \
	  $(MAKE) --no-print-directory $(BPF_OBJS); \
	else echo "BPF congestion controls not built (they need clang, bpftool, libbpf-dev: make kernel-deps; and kernel BTF)"; fi

$(BPF_OUT)/vmlinux.h: /sys/kernel/btf/vmlinux
	@mkdir -p $(BPF_OUT)
	bpftool btf dump file $< format c > $@.tmp && mv $@.tmp $@

$(BPF_OUT)/%.bpf.o: bpf/%.bpf.c $(BPF_OUT)/vmlinux.h
	clang -g -O2 -Wall -target bpf -I $(BPF_OUT) -c $< -o $@

# The kernel backend's system tools (iproute2, ethtool, tcpdump, sysctl) and the BPF toolchain
# for congestion controls written in BPF (clang compiles them, libbpf-dev gives the headers they
# include, bpftool generates vmlinux.h and registers/unregisters them), from Debian's packages
# when missing; without apt or root the kernel tests are skipped and say why.
.PHONY: kernel-deps
kernel-deps:
	@missing=""; \
	for t in ip:iproute2 tc:iproute2 ethtool:ethtool tcpdump:tcpdump sysctl:procps clang:clang bpftool:bpftool \
	         /usr/include/bpf/bpf_helpers.h:libbpf-dev; do \
	  c=$${t%%:*}; if [ "$${c#/}" != "$$c" ]; then [ -e "$$c" ]; else command -v $$c >/dev/null 2>&1; fi \
	    || missing="$$missing $${t#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else echo "kernel backend tools missing:$$missing (install them as root; kernel tests will be skipped)"; fi; \
	fi

# The kernel's own BPF congestion-control selftests (tools/testing/selftests/bpf/progs/
# bpf_cubic.c, bpf_dctcp.c) for tests/test_bpf_selftests.py, taken at build time from Debian's
# kernel source package linux-source-6.12 (installed with apt-get when missing, as root; never
# copied into the repository). Only the two programs and the one header of the selftests they
# include (progs/bpf_tracing_net.h) are extracted, into target/selftests/progs/, and each is
# compiled unchanged with clang -g -O2 -target bpf against target/bpf/vmlinux.h (make bpf) and
# libbpf-dev's headers (/usr/include/bpf: bpf_helpers.h, bpf_tracing.h, bpf_core_read.h).
# Without the package, clang, libbpf-dev or vmlinux.h nothing is built and those tests skip,
# saying why.
SELFTESTS     := target/selftests
SELFTEST_TAR  := /usr/src/linux-source-6.12.tar.xz
SELFTEST_DIR  := linux-source-6.12/tools/testing/selftests/bpf/progs
SELFTEST_SRCS := bpf_cubic.c bpf_dctcp.c bpf_tracing_net.h
.PHONY: kernel-selftests
kernel-selftests:
	@if [ ! -e $(SELFTEST_TAR) ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-source-6.12 >/dev/null; \
	  fi; \
	fi; \
	if [ ! -e $(SELFTEST_TAR) ]; then \
	  echo "kernel BPF selftests not built: linux-source-6.12 is not installed (install it as root; their tests will be skipped)"; \
	elif ! command -v clang >/dev/null 2>&1 || [ ! -e /usr/include/bpf/bpf_helpers.h ] || [ ! -e $(BPF_OUT)/vmlinux.h ]; then \
	  echo "kernel BPF selftests not built: they need clang, libbpf-dev and $(BPF_OUT)/vmlinux.h (make kernel-deps bpf)"; \
	else $(MAKE) --no-print-directory $(SELFTESTS)/bpf_cubic.o $(SELFTESTS)/bpf_dctcp.o; fi

# One pass over the 150 MB archive for the three files.
$(SELFTESTS)/progs/.extracted: $(SELFTEST_TAR)
	@mkdir -p $(SELFTESTS)/progs
	tar -xJf $< -C $(SELFTESTS)/progs --strip-components=6 $(addprefix $(SELFTEST_DIR)/,$(SELFTEST_SRCS))
	dpkg-query -W -f='$${Package} $${Version}\n' linux-source-6.12 > $(SELFTESTS)/SOURCE 2>/dev/null || echo "$<" > $(SELFTESTS)/SOURCE
	touch $@

$(SELFTESTS)/%.o: $(SELFTESTS)/progs/.extracted $(BPF_OUT)/vmlinux.h
	clang -g -O2 -target bpf -I $(BPF_OUT) -I $(SELFTESTS)/progs -c $(SELFTESTS)/progs/$*.c -o $@

demo: build
	$(VENV)/bin/cctestbed run examples/default.toml -o results/default --force --plot

# Headless Chromium (Debian's package) renders the sweep report in its test; where it cannot be
# installed (no apt, not root) that one test is skipped and says why.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	{ command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	echo "chromium not installed: the report rendering test will be skipped"

# tshark (Debian's package) reads every capture the simulator writes in the capture tests; where it
# cannot be installed (no apt, not root) those tests are skipped and say why.
tshark:
	@command -v tshark >/dev/null 2>&1 || \
	{ command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tshark >/dev/null; } || \
	echo "tshark not installed: the capture tests that read captures with it will be skipped"

# Every suite always runs; the target fails if any does: the Rust tests, the type check of the
# Python package (mypy, settings in pyproject.toml), pytest, and last the simulator side of the
# fidelity suite against the checked-in kernel reference (docs/fidelity.md).
# The core is built with the profile a `make build` left, and without one in a fresh clone:
# training it is a second compilation of the core (about 2 minutes of CI's 25), and the profile
# changes how fast the core runs, never what it computes (docs/validation.md, Speed: the same
# outputs bit for bit), so every test asserts the same with or without it.
test: core browser tshark kernel-selftests
	@status=0; \
	cargo test --profile test-release --workspace --no-fail-fast || status=1; \
	$(PY) -m mypy || status=1; \
	$(PY) -m pytest || status=1; \
	$(VENV)/bin/cctestbed fidelity check fidelity/suite.toml --json results/fidelity-check.json || status=1; \
	exit $$status

# The fidelity campaign: every scenario on the kernel (root; hours of real time, resumable, each
# finished rep added to fidelity/kernel-reference.parquet) and on the simulator, then the report
# in results/fidelity. `make fidelity-check` is the simulator side alone, as `make test` runs it.
.PHONY: fidelity fidelity-check
fidelity: build
	$(VENV)/bin/cctestbed fidelity run fidelity/suite.toml -o results/fidelity

fidelity-check: build
	$(VENV)/bin/cctestbed fidelity check fidelity/suite.toml --json results/fidelity-check.json

# The simulator's speed, then the harness around it: validate, the overhead of run beyond the
# simulation, the sweep driver's memory (bench/harness.py --sweep-trials 20000 for the README's figure).
bench: build
	@# built beside the extension's package so that both link the same simulator crate, the one
	@# the profile was taken from
	RUSTFLAGS="$(PGO_FLAGS)" cargo build --release --quiet -p cctestbed-py -p cctestbed-sim --bin ccsim-bench
	target/release/ccsim-bench
	$(PY) bench/harness.py

clean:
	rm -rf $(VENV) results target
