"""Several checks that each need a process of their own, in one interpreter: each in a fork of it.

A check of what a process does at start-up (the environment it read, its first tensor, its first
import) needs a process that has not done it yet; a new interpreter per check pays 2 CPU-s or more
importing torch and trainmesh first. ``FORKS`` is source text for a ``python -c`` program: its
``in_forks(check, modes)`` runs ``check(mode)`` for each mode in a fork of the program, one after
another, and prints each result (a Python literal) on a line of its own, in order, which
``results(stdout)`` reads back; a check that raises prints its traceback on stderr and the program
fails. The program imports what every check shares, and only that, before
``in_forks``: each fork starts from there, as a new interpreter would after those imports.
"""

import ast
import textwrap

MARK = "in_forks result: "

FORKS = textwrap.dedent("""
    import os, sys, traceback

    MARK = "in_forks result: "

    def in_forks(check, modes):
        for mode in modes:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    print(MARK + repr(check(mode)))
                except BaseException:
                    traceback.print_exc()
                    code = 1
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, f"the check of {mode!r} failed"
""")


def results(stdout: str) -> list:
    """The results ``in_forks`` printed in STDOUT, in order (what else the checks printed left out)."""
    return [ast.literal_eval(line[len(MARK) :]) for line in stdout.splitlines() if line.startswith(MARK)]
