#!/usr/bin/env bash
# A long line against the real release binary: memory per waiting visitor (resident size, what
# an operator sees) and `/queue/status` throughput and latency while the line is long. Each
# visitor arrives from its own address and polls twice; the run fails unless every position
# from 1 to the line's length is held by exactly one visitor on both polls. Loopback only;
# everything is bounded (the measuring program gives up after 10 minutes).
#
#   bash benches/line.sh                        # 100,000 visitors, one worker then two
#   VISITORS="100000 1000000" bash benches/line.sh
set -euo pipefail
cd "$(dirname "$0")/.."

VISITORS=${VISITORS:-100000}
CONNECTIONS=${CONNECTIONS:-32}
WORKERS=${WORKERS:-"1 2"}

cargo build --release --locked --quiet
cargo build --release --locked --quiet --example line

for workers in $WORKERS; do
  for visitors in $VISITORS; do
    echo "== $visitors visitors, $workers worker(s)"
    CONCERT_WORKERS=$workers target/release/examples/line target/release/concert "$visitors" "$CONNECTIONS"
  done
done
