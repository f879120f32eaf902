"""Exec a command inside cgroups, a new session keyring and under resource limits:
``python -I -S _limited_exec.py LIMITS_JSON CGROUP_DIRS (comma-separated, or empty) -- ARGV...``.

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


def _new_session_keyring() -> None:
    """Leave the evaluator's session keyring (its secrets, and keys one program could leave for the
    next): join a new anonymous one. Where keyctl itself is refused (a container's seccomp), the
    sandbox cannot reach a keyring either; its own seccomp refuses keyctl in any case."""
    import ctypes
    import platform

    nr = {"x86_64": 250, "aarch64": 219}.get(platform.machine())
    if nr is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(nr, 1, None) < 0 and ctypes.get_errno() not in (1, 38):  # KEYCTL_JOIN_SESSION_KEYRING
        raise OSError(ctypes.get_errno(), "keyctl(JOIN_SESSION_KEYRING) failed")


def rlimit_table(limits: dict) -> list:
    """The resource limits of one sandboxed program, ``(RLIMIT name, value)`` (soft = hard): the one
    table both the launcher and the fallback runner set."""
    return [("RLIMIT_CPU", limits["cpu"]), ("RLIMIT_AS", limits["mem"]), ("RLIMIT_FSIZE", limits["fsize"]),
            ("RLIMIT_NOFILE", 64), ("RLIMIT_CORE", 0), ("RLIMIT_MSGQUEUE", 0)]  # no POSIX message queue bytes


def set_rlimits(limits: dict) -> None:
    for name, val in rlimit_table(limits):
        resource.setrlimit(getattr(resource, name), (val, val))


def main() -> None:
    try:
        limits, cgroup, sep, argv = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
        if sep != "--" or not argv:
            raise ValueError("usage: _limited_exec.py LIMITS_JSON CGROUP -- ARGV...")
        for group in filter(None, cgroup.split(",")):
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))
        _new_session_keyring()
        set_rlimits(limits)
    except Exception as e:  # noqa: BLE001 - fail closed, whatever went wrong
        sys.stderr.write(f"sandbox launcher: {type(e).__name__}: {e}\n")
        os._exit(96)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
