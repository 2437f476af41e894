"""The program of test_batches_crash.py: batched legs (helpers/batches.py) that write a file, or
whose process dies by SIGSEGV, as a native crash in torch or gloo would end it.

python batches_crash_run.py --batch SPEC.json, each leg's argv: MODE OUT [once]
  MODE: ok    write OUT
        segv  read address 0 (the process dies by SIGSEGV); with ``once``, only at its first attempt
Every attempt of a leg adds a line to OUT.attempts.
"""

import ctypes
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from helpers.batches import run_batch  # noqa: E402


def leg(argv: list[str]) -> None:
    mode, out = argv[:2]
    with open(out + ".attempts", "a") as attempts:
        attempts.write("attempt\n")
    first = Path(out + ".attempts").read_text().count("\n") == 1
    if mode == "segv" and (first or "once" not in argv):
        crash_here()
    Path(out).write_text("done")


def crash_here() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash on purpose: no core file
    ctypes.string_at(0)


if __name__ == "__main__":
    run_batch(sys.argv[2], leg, limit=60)
