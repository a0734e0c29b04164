# Concert build and test entry points. `make demo` and `make test` are the README's two commands.
CARGO ?= cargo

.PHONY: all build demo test lint bench bench-compare bench-rounds bench-line bench-instructions docs clean

all: lint test build

# Static Linux binaries plus the host build in bin/; targets this machine cannot build are skipped
# with the reason. Each binary that runs here is checked (static, -version, demo).
build:
	CARGO="$(CARGO)" bash scripts/build.sh

demo:
	$(CARGO) run --release --locked -- -demo -listen 127.0.0.1:8080 -data-dir ""

test:
	$(CARGO) test --locked --all-targets

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings
	@if command -v shellcheck >/dev/null 2>&1; then \
	  shellcheck -x installer.sh ipasn/concert-ipasn-update scripts/*.sh tests/*.sh benches/*.sh .ci/run; \
	else echo "lint: shellcheck not installed; shell scripts not checked"; fi

bench:
	$(CARGO) bench --locked

# Regenerates docs/reference.md, docs/concert.1, docs/completions/* and the README flag table.
docs:
	$(CARGO) run --locked --example gen-docs

# nginx, HAProxy and Concert in front of one origin. LAYOUT=shared (default): proxy and origin
# on one core, wrk alone on the other, with each proxy's own CPU cost per request beside the
# origin's; LAYOUT=split: wrk and origin on one core, the proxy on the other.
bench-compare:
	bash benches/compare.sh

# nginx, HAProxy and Concert in many short paired rounds, counting the rounds Concert leads.
bench-rounds:
	bash benches/rounds.sh

# Memory per waiting visitor and status polling with a long line, against the release binary.
bench-line:
	bash benches/line.sh

# Instructions per proxied page under callgrind: steady enough to compare two builds on a busy host.
bench-instructions:
	bash benches/instructions.sh

clean:
	$(CARGO) clean
	rm -rf bin
