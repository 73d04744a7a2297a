"""`dispersion confirm-duplicate --batch ID`: a batch held as a possible duplicate payroll goes on to the bank
(processor/cli/withdraw.py holds both acts)."""

from __future__ import annotations

import argparse

from processor.cli.withdraw import parser as act_parser
from processor.cli.withdraw import run


def parser() -> argparse.ArgumentParser:
    """Arguments of `dispersion confirm-duplicate`."""
    return act_parser("confirm-duplicate")


def main(argv: list[str]) -> int:
    """`dispersion confirm-duplicate`."""
    return run("confirm-duplicate", argv)
