"""MkDocs hook: the command-line reference page is generated from the parsers themselves.

`docs/reference/cli.md` holds the marker ``<!-- generated: cli-reference -->``; at build time it is
replaced by the ``--help`` of ``trainmesh`` and of every subcommand (found from the choices each
help lists), so a flag added or renamed in the code is in the next build without editing a page.
"""

from __future__ import annotations

import contextlib
import io
import os
import re

MARKER = "<!-- generated: cli-reference -->"


def _help(argv: list[str]) -> str:
    from trainmesh.cli.main import main

    out = io.StringIO()
    # A fixed width, so that the page does not change with the terminal that builds it.
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            main([*argv, "--help"])
    finally:
        if previous is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = previous
    return out.getvalue().rstrip()


def _subcommands(text: str) -> list[str]:
    """The choices a help's usage lines list as ``{a,b,c}``."""
    usage = text.split("\n\n", 1)[0].replace("\n", " ")
    found = re.search(r"\{([a-z_,-]+)\}", usage)
    return found.group(1).split(",") if found else []


def cli_reference() -> str:
    sections, queue = [], [[]]
    while queue:
        argv = queue.pop(0)
        text = _help(argv)
        title = " ".join(["trainmesh", *argv])
        sections.append(f"## `{title}`\n\n```text\n{text}\n```\n")
        if len(argv) < 2:  # trainmesh, its commands and theirs (checkpoint inspect): no deeper level exists
            queue.extend([*argv, sub] for sub in _subcommands(text))
    if len(sections) < 9:  # trainmesh and its 8 commands at least: a parser that changed shape
        raise RuntimeError(f"the CLI reference found only {len(sections)} commands; see docs/hooks/cli_reference.py")
    return "\n".join(sections)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ARG001 (MkDocs' hook signature)
    if MARKER in markdown:
        return markdown.replace(MARKER, cli_reference())
    return markdown
