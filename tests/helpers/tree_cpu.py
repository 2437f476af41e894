"""The whole-tree CPU of a pytest run: pytest and every process it starts, fork-server children included.

``python tests/helpers/tree_cpu.py FILE [PYTEST ARGS...]`` runs ``python -m pytest FILE -n 0 -q -p
no:cacheprovider`` as a child of this process, made a subreaper first (PR_SET_CHILD_SUBREAPER), so
that every descendant that outlives its parent (a fork server, its forks) is re-parented here and
reaped, and prints ``RUSAGE_CHILDREN``'s user + sys seconds. CPU time is what an idle machine pays
for a file; wall time on a loaded one is not. Linux only.
"""

import ctypes
import os
import resource
import subprocess
import sys
import time

if __name__ == "__main__":
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    start = time.time()
    run = [sys.executable, "-m", "pytest", *sys.argv[1:], "-n", "0", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(run, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while True:  # every descendant left, reaped: their CPU counts once they are waited for
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(done.stdout[-1500:])
    print(
        f"TREECPU {sys.argv[1:]} rc={done.returncode} cpu={used.ru_utime + used.ru_stime:.1f} "
        f"user={used.ru_utime:.1f} sys={used.ru_stime:.1f} wall={time.time() - start:.0f}"
    )
