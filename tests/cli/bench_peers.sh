#!/usr/bin/env bash
# tests/cli/bench_peers.sh BUILD_DIR — the GPU-free checks of bench/peers:
# staging, the peers' imports with their optional packages made unimportable, usage errors,
# and the table built from known SUMMARY lines (bench/peers/selftest.sh, ~20 s). SKIP (77)
# without a python with torch or without the peers' snapshots (CI has neither).
exec bash "$(dirname "$0")/../../bench/peers/selftest.sh"
