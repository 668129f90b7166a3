#!/usr/bin/env python3
"""adapters/torch/nsa_torch/main.py — entry point of the PyTorch NSA trainer.

Run through adapters/torch/nsa-torch-train. Puts the package's parent folder on the path
and hands the command line to nsa_torch.cli, which answers --protocol-info and
--list-faults before torch is imported."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from nsa_torch.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
