"""Exec a command inside a pids cgroup and under resource limits:
``python -I -S _limited_exec.py LIMITS_JSON CGROUP_DIR_OR_EMPTY -- ARGV...``.

The sandbox starts bubblewrap through this launcher rather than a ``preexec_fn`` so that the
evaluator may start sandboxes from several threads at once: Python code between fork and exec is
unsafe in a threaded parent, a fresh single-threaded interpreter that ends in ``execv`` is not.
It imports nothing but the standard library (``-S``: no site-packages). Any failure exits 96
before the command runs: no limits, no program.
"""

import json
import os
import resource
import sys


def main() -> None:
    try:
        limits, cgroup, sep, argv = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
        if sep != "--" or not argv:
            raise ValueError("usage: _limited_exec.py LIMITS_JSON CGROUP -- ARGV...")
        if cgroup:
            with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        for name, val in (("RLIMIT_CPU", limits["cpu"]), ("RLIMIT_AS", limits["mem"]),
                          ("RLIMIT_FSIZE", limits["fsize"]), ("RLIMIT_NOFILE", 64), ("RLIMIT_CORE", 0)):
            resource.setrlimit(getattr(resource, name), (val, val))
    except Exception as e:  # noqa: BLE001 - fail closed, whatever went wrong
        sys.stderr.write(f"sandbox launcher: {type(e).__name__}: {e}\n")
        os._exit(96)
    os.execvp(argv[0], argv)


main()
