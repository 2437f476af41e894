"""The parser of a ``trainmesh`` command that is not built by jsonargparse, in the same help style.

``trainmesh fit``/``validate``/``test``/``predict``/``checkpoint`` are jsonargparse parsers;
``estimate``/``scale``/``project`` are plain argparse ones (their arguments are not a class's). So
that ``--help`` reads alike everywhere, these get jsonargparse's help line and no abbreviations.
"""

from __future__ import annotations

import argparse

HELP_LINE = "Show this help message and exit."  # jsonargparse's wording, used by fit and checkpoint


def command_parser(prog: str, description: str, epilog: str) -> argparse.ArgumentParser:
    """An argparse parser for ``prog`` with the commands' common help style.

    >>> command_parser("trainmesh demo", "What it does.", "How to use it.").format_help().splitlines()[0]
    'usage: trainmesh demo [-h]'
    """
    parser = argparse.ArgumentParser(
        prog=prog, description=description, epilog=epilog, allow_abbrev=False, add_help=False
    )
    parser.add_argument("-h", "--help", action="help", help=HELP_LINE)
    return parser
