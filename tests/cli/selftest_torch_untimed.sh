#!/usr/bin/env bash
# tests/cli/selftest_torch_untimed.sh — the detections of the PyTorch detection matrix that judge
# no time and run one rank (tests/cli/selftest_torch.sh BUILD untimed): branch_isolation clean,
# drop_grad and crash, gate_init, gc_bisection, seqlen_nan_sweep, clean and with their faults.
# The others: tests/cli/selftest_torch.sh (RUN_SERIAL). SKIP (77) as that test does.
exec bash "$(dirname "$0")/selftest_torch.sh" "${1:?usage: bash tests/cli/selftest_torch_untimed.sh <build dir>}" untimed
