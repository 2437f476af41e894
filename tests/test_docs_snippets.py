"""Every fenced Python block of the documentation (every page under docs/, and the README) runs.

A page's blocks run in order in one process of their own (one namespace, as a reader follows the
page), in a temporary directory: a fork of the fork server that imported torch and trainmesh once
(helpers/forked.py; no page is about how a process starts or imports). An HTML comment just before a block changes that, and is invisible on
the site:

- ``<!-- snippet: skip reason="needs 2 GPUs" -->``: not run; the reason is required.
- ``<!-- snippet: tested-by test="tests/x/test_y.py::test_name" -->``: not run here, because that
  named test runs it (checked: the test exists).
- ``<!-- snippet: same-as page="docs/getting-started/tour.md" -->``: not run here, because that
  page's blocks contain every line of it (checked), and they run.
- ``<!-- snippet: setup`` + Python lines + ``-->``: what the block elides (its ``model``, ``loader``),
  run just before it.
- ``<!-- snippet: size old="max_epochs=5" new="max_epochs=1" -->``: from here on, the page's blocks
  run with ``old`` replaced by ``new`` (small sizes); ``old`` must occur in a later block.

docs/notes/ (engineers' text not yet folded into a page) is left out, as the site leaves it out.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.forked import can_fork, run_forked

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
MARKER = re.compile(r"<!--\s*snippet:\s*([a-z-]+)(.*?)-->", re.S)
KINDS = {"skip": {"reason"}, "tested-by": {"test"}, "same-as": {"page"}, "setup": set(), "size": {"old", "new"}}


@dataclass
class Block:
    page: str
    line: int
    code: str
    markers: list[tuple[str, dict[str, str], str]] = field(default_factory=list)  # (kind, keys, body)

    def marker(self, kind: str) -> tuple[dict[str, str], str] | None:
        found = [(keys, body) for k, keys, body in self.markers if k == kind]
        return found[0] if found else None

    @property
    def runs(self) -> bool:
        return not any(self.marker(kind) for kind in ("skip", "tested-by", "same-as"))


def pages() -> list[str]:
    found = [p for p in sorted(DOCS.rglob("*.md")) if "notes" not in p.relative_to(DOCS).parts]
    return ["README.md", *(str(p.relative_to(ROOT)) for p in found)]


def _keys(text: str) -> dict[str, str]:
    return dict(re.findall(r'([a-z]+)="([^"]*)"', text))


def blocks(page: str) -> list[Block]:
    """The page's python blocks, each with the markers between it and the block before it."""
    text = (ROOT / page).read_text()
    found, previous_end = [], 0
    for match in FENCE.finditer(text):
        between = text[previous_end : match.start()]
        markers = []
        for kind, rest in MARKER.findall(between):
            if kind == "setup":
                markers.append((kind, {}, rest.strip("\n")))
            else:
                markers.append((kind, _keys(rest), ""))
        found.append(Block(page, text.count("\n", 0, match.start()) + 2, match.group(1), markers))
        previous_end = match.end()
    return found


def sized(page_blocks: list[Block]) -> list[tuple[Block, str]]:
    """Each block with the page's size replacements made so far applied to it."""
    replacements: list[tuple[str, str]] = []
    out = []
    for block in page_blocks:
        replacements += [(keys["old"], keys["new"]) for kind, keys, _ in block.markers if kind == "size"]
        code = block.code
        for old, new in replacements:
            code = code.replace(old, new)
        out.append((block, code))
    return out


def program(page: str) -> str:
    """One script running the page's runnable blocks in order; tracebacks name page:line."""
    parts = ["namespace = {'__name__': '__main__'}"]
    for block, code in sized(blocks(page)):
        if not block.runs:
            continue
        setup = block.marker("setup")
        if setup:
            parts.append(f"exec(compile({setup[1]!r}, {f'{page}:{block.line} (setup)'!r}, 'exec'), namespace)")
        parts.append(f"exec(compile({code!r}, {f'{page}:{block.line}'!r}, 'exec'), namespace)")
    return "\n".join(parts) + "\n"


RUNNABLE = [page for page in pages() if any(block.runs for block in blocks(page))]


@pytest.mark.parametrize("page", RUNNABLE)
def test_the_pages_python_blocks_run(page, tmp_path):
    env = {**os.environ, "KERAS_BACKEND": "torch", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT / "src")}
    script = tmp_path / "page.py"
    script.write_text(program(page))
    # A hang guard, not a time limit (never asserted on): the pages' blocks are small.
    if can_fork():
        done = run_forked(script, [], env=env, timeout=600, cwd=tmp_path)
    else:
        done = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
    assert done.returncode == 0, f"{page}'s blocks failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def test_every_marker_is_known_and_says_why():
    problems = []
    for page in pages():
        for block in blocks(page):
            for kind, keys, body in block.markers:
                where = f"{page}:{block.line}"
                if kind not in KINDS:
                    problems.append(f"{where}: unknown snippet marker {kind!r} (known: {sorted(KINDS)})")
                elif not KINDS[kind] <= set(keys) or any(not keys[k].strip() for k in KINDS[kind]):
                    problems.append(f"{where}: '{kind}' needs {sorted(KINDS[kind])}, got {keys}")
                elif kind == "setup" and not body.strip():
                    problems.append(f"{where}: an empty setup marker")
    assert not problems, "\n".join(problems)


def test_a_block_run_elsewhere_names_where_and_that_runs_it():
    problems = []
    for page in pages():
        for block in blocks(page):
            where = f"{page}:{block.line}"
            tested = block.marker("tested-by")
            if tested and "test" in tested[0]:
                path, _, name = tested[0]["test"].partition("::")
                test_file = ROOT / path
                if not test_file.is_file() or not re.search(rf"^def {re.escape(name)}\(", test_file.read_text(), re.M):
                    problems.append(f"{where}: tested-by names {tested[0]['test']}, which does not exist")
            same = block.marker("same-as")
            if same and "page" in same[0]:
                other = same[0]["page"]
                other_blocks = [b for b in blocks(other) if b.runs] if (ROOT / other).is_file() else []
                lines = {line for b in other_blocks for line in b.code.splitlines()}
                missing = [line for line in block.code.splitlines() if line.strip() and line not in lines]
                if not other_blocks or missing:
                    problems.append(f"{where}: not in {other}'s run blocks: {missing[:3] or 'no such page or block'}")
    assert not problems, "\n".join(problems)


def test_every_size_replacement_changes_a_block():
    problems = []
    for page in pages():
        page_blocks = blocks(page)
        for at, block in enumerate(page_blocks):
            for kind, keys, _ in block.markers:
                if kind == "size" and not any(keys.get("old", "") in b.code for b in page_blocks[at:] if b.runs):
                    problems.append(
                        f"{page}:{block.line}: size {shlex.quote(keys.get('old', ''))} occurs in no later block"
                    )
    assert not problems, "\n".join(problems)


def test_the_markers_are_read_as_written(tmp_path):
    # Self-test of the parser on a page written here: the marker binds to the next block only.
    text = (
        '<!-- snippet: skip reason="needs 2 GPUs" -->\n```python\nraise SystemExit(1)\n```\n\n'
        '<!-- snippet: size old="3" new="1" -->\n<!-- snippet: setup\nx = 2\n-->\n```python\nassert x * 3 == 2\n```\n'
        "```python\nprint(3)\n```\n"
    )
    page = tmp_path / "page.md"  # an absolute path: ROOT / page is the page itself
    page.write_text(text)
    found = blocks(str(page))
    assert [b.runs for b in found] == [False, True, True]
    assert found[0].marker("skip") == ({"reason": "needs 2 GPUs"}, "")
    assert found[1].marker("setup") == ({}, "x = 2")
    assert [code for _, code in sized(found)] == ["raise SystemExit(1)\n", "assert x * 1 == 2\n", "print(1)\n"]
    script = program(str(page))
    assert "raise SystemExit" not in script
    assert subprocess.run([sys.executable, "-c", script], capture_output=True).returncode == 0
