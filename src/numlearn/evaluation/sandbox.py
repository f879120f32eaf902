"""Run untrusted generated programs (PoT) in an isolated child process.

Layers, each of which holds on its own:
1. Operating system: a new process session (the whole group is killed at the end), resource
   limits (CPU seconds, address space, file size -- which also caps the captured output --, open
   files, processes), a throwaway working directory, a clean environment, stdin closed. When the
   evaluator runs as root, the child also enters a new network namespace (no interfaces: no
   network) and drops to an unprivileged uid/gid, so it can neither write outside its directory,
   nor signal the evaluator, nor read its ``/proc/<pid>/environ``.
2. Python: the child installs an audit hook before running the program that refuses sockets,
   process creation (fork, exec, subprocess, os.system), signals (``os.kill``), C function lookup
   and calls through ``ctypes`` and
   files opened for writing outside the working directory. This layer works without root.

The program's stdout is what PoT uses as the answer; nothing it does can raise in the evaluator:
every failure becomes ``ProgramResult(ok=False, error=...)``.
"""

from __future__ import annotations

import ctypes
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

CLONE_NEWNET = 0x40000000
# An otherwise unused uid/gid for sandboxed programs when running as root.
SANDBOX_UID = int(os.environ.get("NUMLEARN_SANDBOX_UID", "61513"))

_GUARD = r'''
import os, sys
_cwd = os.path.realpath(os.getcwd())
_pid = str(os.getpid())
_BLOCK = {"socket.socket", "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
          "socket.gethostbyname", "os.fork", "os.forkpty", "os.vfork", "os.system", "os.exec", "os.posix_spawn",
          "os.spawn", "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill",
          "os.setuid", "os.putenv", "os.unsetenv", "pty.spawn", "os.startfile",
          "_posixsubprocess.fork_exec"}
def _hook(event, args):
    # "import ctypes" (done by sympy/mpmath) only opens the interpreter itself; looking up or
    # calling a C function is what would bypass this hook, so those are refused.
    if event in _BLOCK or (event.startswith("ctypes.") and event != "ctypes.dlopen"):
        raise PermissionError(f"sandbox: {event} is not allowed")
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        mode = args[1] if len(args) > 1 and isinstance(args[1], str) else "r"
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        real = os.path.realpath(path)
        writing = any(c in mode for c in "wax+") or (flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
        if writing and not (real == _cwd or real.startswith(_cwd + os.sep)):
            raise PermissionError(f"sandbox: writing {path!r} outside the working directory is not allowed")
        if real.startswith("/proc/") and not (real.startswith("/proc/self") or real.startswith("/proc/" + _pid)):
            raise PermissionError(f"sandbox: reading {path!r} is not allowed")
    if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "shutil.rmtree",
                 "os.truncate", "os.link", "os.symlink"):
        for a in args:
            if isinstance(a, (str, bytes)):
                real = os.path.realpath(os.fsdecode(a))
                if not (real == _cwd or real.startswith(_cwd + os.sep)):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
with open("program.py", encoding="utf-8") as f:
    _src = f.read()
_code = compile(_src, "program.py", "exec")
sys.addaudithook(_hook)
del _hook
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
'''


# Whether the interpreter is reachable by the sandbox uid (it is not when it lives under a
# private home such as /root); decided on first use, then the uid drop is skipped if impossible.
_UID_DROP_WORKS: bool | None = None


@dataclass
class ProgramResult:
    stdout: str
    ok: bool
    timed_out: bool = False
    error: str = ""
    returncode: int | None = None
    output_truncated: bool = False
    seconds: float = 0.0


def _preexec(limits: dict[str, int], as_root: bool, drop_uid: bool):
    def fn():
        os.setsid()
        for res, val in ((resource.RLIMIT_CPU, limits["cpu"]), (resource.RLIMIT_AS, limits["mem"]),
                         (resource.RLIMIT_FSIZE, limits["fsize"]), (resource.RLIMIT_NOFILE, 64),
                         (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(res, (val, val))
        if as_root:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.unshare(CLONE_NEWNET) != 0:
                os._exit(97)  # refuse to run without network isolation when it should be possible
            if drop_uid:
                os.setgroups([])
                os.setgid(SANDBOX_UID)
                os.setuid(SANDBOX_UID)
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))
    return fn


def _kill_uid_processes(uid: int) -> None:
    """Kill every process of the sandbox uid (programs that escaped their process group)."""
    pid = os.fork()
    if pid == 0:  # child: become the uid, then kill(-1) reaches exactly that uid's processes
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        os._exit(0)
    os.waitpid(pid, 0)


def run_program(code: str, timeout_s: float = 5.0, memory_mb: int = 1024, max_output_bytes: int = 65536,
                max_procs: int = 16, python: str | None = None) -> ProgramResult:
    """Run ``code`` as a Python program in the sandbox; return its stdout and status.

    ``ok`` is True only when the program exited with status 0 within ``timeout_s`` seconds of wall
    time. ``stdout`` holds at most ``max_output_bytes`` bytes.
    """
    global _UID_DROP_WORKS
    as_root = os.geteuid() == 0
    tmp = tempfile.mkdtemp(prefix="numlearn-pot-")
    t0 = time.monotonic()
    try:
        with open(os.path.join(tmp, "program.py"), "w", encoding="utf-8") as f:
            f.write(code)
        with open(os.path.join(tmp, "guard.py"), "w", encoding="utf-8") as f:
            f.write(_GUARD)
        if as_root:
            os.chown(tmp, SANDBOX_UID, SANDBOX_UID)
            os.chmod(tmp, 0o700)
        out_path, err_path = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        limits = {"cpu": int(timeout_s) + 1, "mem": memory_mb * 1024 * 1024, "fsize": max_output_bytes + 1,
                  "nproc": max_procs if not as_root else 4096}
        with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
            if as_root:
                os.chown(out_path, SANDBOX_UID, SANDBOX_UID)
                os.chown(err_path, SANDBOX_UID, SANDBOX_UID)
            argv = [python or sys.executable, "-I", "-B", "guard.py"]
            drop = as_root and _UID_DROP_WORKS is not False
            try:
                try:
                    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                            preexec_fn=_preexec(limits, as_root, drop), close_fds=True)
                    if drop:
                        _UID_DROP_WORKS = True
                except PermissionError:
                    if not drop:
                        raise
                    _UID_DROP_WORKS = False  # interpreter not reachable by the sandbox uid
                    proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe,
                                            preexec_fn=_preexec(limits, as_root, False), close_fds=True)
            except (OSError, subprocess.SubprocessError) as e:
                return ProgramResult("", False, error=f"could not start sandbox: {e}")
            timed_out = False
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out, rc = True, None
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if drop and _UID_DROP_WORKS:
                    _kill_uid_processes(SANDBOX_UID)
                if rc is None:
                    try:
                        rc = proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        rc = None
        with open(out_path, "rb") as f:
            raw = f.read(max_output_bytes + 1)
        with open(err_path, "rb") as f:
            err = f.read(4000).decode("utf-8", "replace")
        truncated = len(raw) > max_output_bytes
        stdout = raw[:max_output_bytes].decode("utf-8", "replace")
        secs = time.monotonic() - t0
        if timed_out:
            return ProgramResult(stdout, False, True, f"timed out after {timeout_s:g}s", rc, truncated, secs)
        if rc == 97 and as_root:
            return ProgramResult(stdout, False, False, "sandbox: could not isolate the network", rc, truncated, secs)
        if rc != 0:
            if rc is not None and rc < 0:
                sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
                reason = {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output size limit",
                          "SIGKILL": "killed", "SIGSEGV": "crashed"}.get(sig, sig)
                msg = f"terminated: {reason}"
            else:
                last = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
                msg = last[-300:]
            return ProgramResult(stdout, False, False, msg, rc, truncated, secs)
        if truncated:
            return ProgramResult(stdout, False, False, "output size limit", rc, True, secs)
        return ProgramResult(stdout, True, False, "", rc, False, secs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
