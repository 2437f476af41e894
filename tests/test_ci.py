"""`.ci/run` runs exactly the README's test command (the docs' install page shows the same), and that command
shows its progress; the suite's test files can all be collected together (no two of one name)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)\n```", readme, flags=re.S)
    commands = [block for block in blocks if "python -m pytest" in block and '-e ".[test]"' in block]
    assert len(commands) == 1, f"expected one README block with the test command, found {len(commands)}"
    return commands[0]


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_test_command() in script


def test_the_install_page_shows_the_readme_test_command():
    # The docs' install page repeats the set-up commands; it must not drift from the README's.
    page = (ROOT / "docs" / "getting-started" / "install.md").read_text()
    assert _readme_test_command() in page


def test_the_test_command_says_each_step_and_shows_the_slowest_tests():
    command = _readme_test_command()
    parts = [part.strip() for part in command.split("&&")]
    for step in [
        "pip install",
        "ruff check",
        "ruff format --check",
        "mypy",
        "mkdocs build --strict",
        "python -m pytest",
    ]:
        at = next(i for i, part in enumerate(parts) if part.startswith(step))
        assert parts[at - 1].startswith("echo "), f"no line printed before {step}"
    assert " -q " not in command, "a quiet install hides a step that can take ten minutes"
    assert "--durations=30" in command


def test_no_two_test_files_share_a_name():
    """pytest imports the test files by their names alone (no package __init__.py, its default import mode):
    two of one name stop the whole suite's collection ("import file mismatch"), so .ci/run runs no test at all."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    assert not {name: paths for name, paths in names.items() if len(paths) > 1}
