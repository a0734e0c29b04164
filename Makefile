# Concert build and test entry points. `make demo` and `make test` are the README's two commands.
CARGO ?= cargo

.PHONY: all build demo test lint bench bench-compare clean

all: lint test build

build:
	$(CARGO) build --release --locked
	mkdir -p bin
	cp target/release/concert bin/concert

demo:
	$(CARGO) run --release --locked -- -demo -listen 127.0.0.1:8080 -data-dir ""

test:
	$(CARGO) test --locked --all-targets

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --locked --all-targets -- -D warnings

bench:
	$(CARGO) bench --locked

bench-compare:
	bash benches/compare.sh

clean:
	$(CARGO) clean
	rm -rf bin
