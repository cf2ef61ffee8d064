"""What the command lines of `bench sparse`, `bench deltanet` and `bench whisper` share:
`--threads N` (torch's CPU threads), `--json PATH` (also write the numbers) and
`--markdown PATH` (print the tables of such a file instead of measuring)."""

from __future__ import annotations

import argparse
import json

import torch


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """Add --threads, --json and --markdown to parser."""
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--json", metavar="PATH", help="also write the numbers as JSON")
    parser.add_argument("--markdown", metavar="PATH", help="print the tables of a --json file")


def tables_or_threads(args: argparse.Namespace, markdown) -> bool:
    """With --markdown, print markdown(numbers read from that file) and return True (nothing is
    measured); otherwise set torch's threads if --threads is given and return False."""
    if args.markdown:
        with open(args.markdown) as f:
            print("\n".join(markdown(json.load(f))))
        return True
    if args.threads:
        torch.set_num_threads(args.threads)
    return False


def write_numbers(args: argparse.Namespace, numbers: dict) -> None:
    """Write numbers to --json's path, if it was given."""
    if args.json:
        with open(args.json, "w") as f:
            json.dump(numbers, f, indent=1)
