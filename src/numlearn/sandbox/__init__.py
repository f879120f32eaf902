"""Run untrusted generated programs (PoT) in an isolated child process.

The boundary is the operating system, through bubblewrap (``bwrap``): each program runs in its
own user, mount, pid, network, ipc, uts and cgroup namespaces, as uid/gid 65534 with no
capabilities, no new privileges, a new session, and a filesystem holding only ``/usr``, the
interpreter's prefix and the virtual environment (read-only), and size-bounded tmpfs dirs for its
working directory, ``/tmp`` and ``/dev/shm`` -- no data, no repository, no home, no ``/etc``, and
nothing on the host's disk. It cannot see or signal the evaluator (a new pid namespace), has no
route to the host's network (a new network namespace), cannot make a nested user namespace, write
the host's ``/proc/sys`` or read kernel internals under ``/proc``, and a seccomp filter refuses
keyrings, io_uring, mounts, ptrace, bpf and the like (``sandbox_seccomp``); everything it started
dies with it (the namespace's init is killed). Resource limits (CPU seconds, address space, file
size, open files), pids and memory cgroups for the whole sandbox where they can be created, and a
wall-clock kill apply on top. ``docs/sandbox.md`` lists what is contained and what is not.

Why bubblewrap: it is what Flatpak uses for the same job, small (a single setuid-free binary in
Debian), needs no daemon (Docker needs one, and none runs on these machines), and fails loudly when
namespaces are unavailable; nsjail would do too but is not packaged for Debian 12. Calling
``unshare``/``mount`` ourselves would re-implement what it does.

If bubblewrap is missing or cannot create the namespaces, ``run_program`` refuses with
``SandboxUnavailable`` (one line saying how to fix it) unless the caller opts in to the weaker
process-level isolation with ``allow_unsafe=True`` (``eval.allow_unsafe_exec=true``, recorded in
every result.json). That fallback -- a new session, rlimits, a throwaway directory, a clean
environment, a network namespace and uid drop when root -- is what ran before; it is not a
boundary (the uid drop is impossible when the interpreter lives under /root, as here).

A second layer inside the child, never the boundary: an audit hook that refuses sockets, process
creation, signals, ``ctypes`` calls and writes outside the working directory (Python's audit hooks
are documented as bypassable by the code they watch; the tests bypass it on purpose and check that
the namespaces still hold).

The program's stdout is what PoT uses as the answer; nothing it does can raise in the evaluator:
every failure becomes ``ProgramResult(ok=False, error=...)``.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from itertools import count

from ._limited_exec import set_rlimits

CLONE_NEWNET = 0x40000000
# An otherwise unused uid/gid for sandboxed programs when running as root (fallback only).
SANDBOX_UID = int(os.environ.get("NUMLEARN_SANDBOX_UID", "61513"))
NOBODY = 65534
WORKDIR = "/sandbox"


class SandboxUnavailable(RuntimeError):
    """The operating-system boundary cannot be set up on this machine."""

_GUARD = r'''
import os, sys
_cwd = os.path.realpath(os.getcwd())
_pid = str(os.getpid())
_BLOCK = {"socket.socket", "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo",
          "socket.gethostbyname", "os.fork", "os.forkpty", "os.vfork", "os.system", "os.exec", "os.posix_spawn",
          "os.spawn", "subprocess.Popen", "os.kill", "os.killpg", "signal.pthread_kill",
          "os.setuid", "pty.spawn", "os.startfile",
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
    if event in ("os.chmod", "os.chown", "os.utime", "os.truncate") and args and isinstance(args[0], int):
        # the fd forms (fchmod, fchown, futimes, ftruncate): the path is unknown, so refused
        raise PermissionError(f"sandbox: {event} on a file descriptor is not allowed")
    if event in ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "shutil.rmtree",
                 "os.truncate", "os.link", "os.symlink", "os.utime"):
        for a in args[:1] if event in ("os.chmod", "os.chown", "os.utime", "os.truncate") else args:
            if isinstance(a, (str, bytes)):
                real = os.path.realpath(os.fsdecode(a))
                if not (real == _cwd or real.startswith(_cwd + os.sep)):
                    raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
# Modules the caller asked to have loaded before the program starts (the official executor's
# forked child inherits its parent's: sympy, numpy, ...), imported before the hook, then a byte on
# the ready pipe (or a ".ready" file, outside bwrap) tells the parent to start the program's clock
# (run_program(start=Start(..., clock_after_preload=True))).
if os.path.exists("preload.json"):
    import importlib, json
    with open("preload.json", encoding="utf-8") as f:
        _preload = json.load(f)
    for _m in _preload:
        try:
            importlib.import_module(_m)
        except Exception:
            pass
    del importlib, json, _preload
with open("program.py", encoding="utf-8") as f:
    _src = f.read()
_code = compile(_src, "program.py", "exec")
_ready = os.environ.pop("NUMLEARN_READY_FD", None)
if _ready is not None:  # under bwrap: a pipe to the parent (the working dir is not visible to it)
    os.write(int(_ready), b"r")
    os.close(int(_ready))
else:
    open(".ready", "w").close()
del _ready
sys.addaudithook(_hook)
del _hook
exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
'''

# RLIMIT_AS, where the memory cgroup is the cap: this many times the group's bound (a backstop against
# address-space games, far enough above the cap that the cgroup, whose kills the supervisor sees, decides).
AS_BACKSTOP = 4


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
    isolation: str = ""
    memory_limited: bool = False  # the memory cgroup killed it (observed by the supervisor, never read from the program)
    startup_seconds: float = 0.0  # interpreter + preloaded imports, outside the time budget (clock_after_preload)


# /proc entries a sandbox that maps to host root must not read or write (the uid inside is 65534, but
# when the evaluator runs as root it is host root outside): the host's kernel settings stay read-only,
# and what leaks kernel memory, keys or other processes' layout is covered by /dev/null.
_PROC_READ_ONLY = ("sys", "sysrq-trigger", "irq", "bus", "fs", "acpi", "scsi", "driver", "sysvipc", "tty")
_PROC_MASKED = ("kcore", "keys", "key-users", "kmsg", "kallsyms", "kpageflags", "kpagecount", "kpagecgroup",
                "slabinfo", "timer_list", "sched_debug", "latency_stats", "vmallocinfo", "pagetypeinfo",
                "iomem", "ioports", "modules", "config.gz", "lock_stat", "mtrr")
# Size of each tmpfs the program can write: /tmp, /dev/shm and its working dir (RAM, not host disk).
TMPFS_MB = 64


_DEV_NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}


@lru_cache(maxsize=1)
def _private_dev() -> str | None:
    """As root: a directory of the sandbox's own device nodes (null, zero, full, random, urandom),
    owned by ``SANDBOX_UID``. bwrap's ``--dev`` binds the host's nodes, and a program whose uid maps to
    the evaluator's -- root -- owns them: ``fchmod``/``utime`` on its ``/dev/null`` changed the host's.
    These nodes are not the host's, and their owner is not mapped in the sandbox, so a mode, owner or
    time change is refused (EPERM) and could only ever reach this directory. None when not root (the
    host's nodes are then root's, which the sandbox's uid is not).

    The directory is made unpredictably and exclusively (``mkdtemp``: a directory of that name planted by
    another user cannot be taken for ours) once per process, checked (its ``null`` must open: a ``nodev``
    temporary filesystem, systemd's default for ``/tmp``, makes device nodes unopenable) and removed at exit.
    Where it cannot be made safe, the sandbox is unavailable (``SandboxUnavailable`` naming the cause): it
    never falls back to the host's nodes."""
    if os.geteuid() != 0:
        return None
    import atexit

    where = tempfile.gettempdir()
    try:
        d = tempfile.mkdtemp(prefix=f"numlearn-sandbox-dev-{SANDBOX_UID}-")
        atexit.register(shutil.rmtree, d, True)
        os.chmod(d, 0o755)
        for name, (major, minor) in _DEV_NODES.items():
            path = os.path.join(d, name)
            os.mknod(path, 0o020666, os.makedev(major, minor))
            os.chmod(path, 0o666)
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        os.close(os.open(os.path.join(d, "null"), os.O_WRONLY))
    except OSError as e:
        raise SandboxUnavailable(
            f"the sandbox's private device nodes cannot be made under {where} ({e.strerror or e}; a filesystem "
            "mounted nodev, e.g. systemd's /tmp, cannot hold them): point TMPDIR at a directory on a filesystem "
            "that allows device nodes, or eval.allow_unsafe_exec=true to run without an OS boundary") from None
    return d


def _dev_args() -> list[str]:
    """``/dev`` inside: a bounded tmpfs with the private nodes (as root), else bwrap's ``--dev`` (the
    host's nodes, which an unprivileged evaluator's uid does not own); ``/dev/fd`` and the std streams."""
    d = _private_dev()
    if d is None:
        return ["--dev", "/dev"]
    out = ["--size", str(1 << 20), "--tmpfs", "/dev"]
    for name in _DEV_NODES:
        out += ["--dev-bind", os.path.join(d, name), f"/dev/{name}"]
    for link, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        out += ["--symlink", target, f"/dev/{link}"]
    return out


def _bwrap_argv(python: str, files: dict[str, int], seccomp_fd: int | None = None,
                env: dict[str, str] | None = None) -> list[str]:
    """``files``: path in the working dir -> an fd bwrap copies it from (the working dir is a
    size-bounded tmpfs, so nothing the program writes reaches the host's disk)."""
    ro = []
    prefixes = {os.path.realpath(sys.base_prefix), sys.prefix, os.path.realpath(sys.prefix)}
    if python != sys.executable:  # another interpreter or venv: its root too
        prefixes.add(os.path.dirname(os.path.dirname(os.path.abspath(python))))
    for path in sorted(prefixes):
        if not path.startswith("/usr"):
            ro += ["--ro-bind", path, path]
    links = []
    for name in ("bin", "lib", "lib64", "sbin"):
        target = f"/{name}"
        if os.path.islink(target):
            links += ["--symlink", os.readlink(target), target]
        elif os.path.isdir(target):
            links += ["--ro-bind", target, target]
    proc = []
    for name in _PROC_READ_ONLY:
        if os.path.exists(f"/proc/{name}"):
            proc += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in _PROC_MASKED:
        if os.path.exists(f"/proc/{name}"):
            proc += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    size = str(TMPFS_MB << 20)
    put = []
    for name, fd in files.items():
        put += ["--perms", "0644", "--file", str(fd), f"{WORKDIR}/{name}"]
    setenv = []
    for k, v in {"PATH": "/usr/bin:/bin", "HOME": WORKDIR, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
                 "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                 **(env or {})}.items():
        setenv += ["--setenv", k, v]
    # Order matters: a later mount covers an earlier one, so the private /tmp comes first and the
    # interpreter / venv binds (which may live under the host's /tmp, as in a CI clone) go on top.
    # --unshare-user + --disable-userns: no nested user namespace (which could mount cgroup2 or
    # procfs anew); --seccomp: keyctl, io_uring, mount, ptrace, bpf, ... refused (sandbox_seccomp).
    return ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--uid", str(NOBODY), "--gid", str(NOBODY), "--hostname", "sandbox",
            "--size", size, "--tmpfs", "/tmp", "--proc", "/proc", *proc, *_dev_args(),
            "--size", size, "--tmpfs", "/dev/shm",
            "--ro-bind", "/usr", "/usr", *links, *ro,
            "--perms", "1777", "--size", size, "--tmpfs", WORKDIR, *put, "--chdir", WORKDIR,
            # Read-only last: the device nodes --dev binds are the host's inodes (inside, the program's uid
            # maps to the evaluator's, root when it runs as root), so their mounts must refuse a mode, owner
            # or time change (EROFS; reading and writing a device node needs no writable mount); and the
            # root and /dev tmpfs, which take no size, hold nothing the program may write.
            "--remount-ro", "/dev", "--remount-ro", "/",
            *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
            "--clearenv", *setenv,
            "--", python, "-I", "-B", "guard.py"]


# Syscalls the program never needs and that reach kernel state beyond its namespaces: the kernel
# keyrings (an inherited session keyring, /proc/keys), io_uring, (u)mount / namespaces, ptrace,
# bpf / perf, module and kexec loading, handle-based opens. Each returns EPERM. Numbers per arch.
_SECCOMP_BLOCK = {
    # AUDIT_ARCH_X86_64: keyctl add_key request_key io_uring_setup/enter/register unshare setns
    # mount umount2 pivot_root ptrace bpf perf_event_open userfaultfd kexec_load kexec_file_load
    # init_module finit_module delete_module open_by_handle_at name_to_handle_at fsopen fsconfig
    # fsmount move_mount open_tree mount_setattr process_vm_readv process_vm_writev
    "x86_64": (0xC000003E, (250, 248, 249, 425, 426, 427, 272, 308, 165, 166, 155, 101, 321, 298, 323, 246, 320,
                            175, 313, 176, 304, 303, 430, 431, 432, 429, 428, 442, 310, 311, 433, 438,
                            253, 294, 300, 240)),
    "aarch64": (0xC00000B7, (219, 217, 218, 425, 426, 427, 97, 268, 40, 39, 41, 117, 280, 241, 282, 104, 294,
                             105, 273, 106, 265, 264, 430, 431, 432, 429, 428, 442, 270, 271, 433, 438,
                             26, 262, 180)),
}
# ... and (issue 58) inotify_init, inotify_init1, fanotify_init and mq_open: their instances and queues count
# against a per-user limit, and the program's uid maps to the evaluator's (root) -- a program could exhaust
# the host root's inotify instances or message queues. A PoT program needs none of them.
# ... plus fspick (433) and pidfd_getfd (438), which passed the list (issue 41); and every number from
# the first one not reviewed on: syscalls added after Linux 6.13's removexattrat (466) -- open_tree_attr
# (467) was the first -- get EPERM until someone reads them. New syscalls share one numbering on both.
_SECCOMP_FIRST_UNREVIEWED = 467
# socket(2) and socketpair(2): only these address families (args[0]); every other -- netlink, vsock, packet,
# inet even in the empty network namespace -- gets EPERM. Python's start-up opens no socket; AF_UNIX is what a
# program's own process pool would use.
_SOCKET_CALLS = {"x86_64": (41, 53), "aarch64": (198, 199)}
SOCKET_FAMILIES_ALLOWED = (1,)  # AF_UNIX
_X32_BIT = 0x40000000


def sandbox_seccomp(machine: str | None = None) -> bytes:
    """The classic-BPF seccomp program bwrap installs (``--seccomp FD``): another architecture than
    the one it was written for is killed; each blocked syscall, every number from
    ``_SECCOMP_FIRST_UNREVIEWED`` on (not yet reviewed) and, on x86_64, the x32 ABI get EPERM;
    ``socket``/``socketpair`` of a family outside ``SOCKET_FAMILIES_ALLOWED`` get EPERM; everything else is
    allowed. Raises ``SandboxUnavailable`` on an architecture without a table."""
    import platform
    import struct

    machine = machine or platform.machine()
    if machine not in _SECCOMP_BLOCK:
        raise SandboxUnavailable(f"no seccomp table for {machine!r}: the sandbox supports "
                                 f"{', '.join(_SECCOMP_BLOCK)}; eval.allow_unsafe_exec=true runs without an OS boundary")
    arch, nrs = _SECCOMP_BLOCK[machine]
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, errno_eperm, kill = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # ALLOW, ERRNO(EPERM), KILL_PROCESS
    prog = [(ld_w_abs, 0, 0, 4),  # seccomp_data.arch
            (jeq_k, 1, 0, arch), (ret_k, 0, 0, kill),
            (ld_w_abs, 0, 0, 0)]  # seccomp_data.nr
    if machine == "x86_64":
        prog += [(jge_k, 0, 1, _X32_BIT), (ret_k, 0, 0, errno_eperm)]
    prog += [(jge_k, 0, 1, _SECCOMP_FIRST_UNREVIEWED), (ret_k, 0, 0, errno_eperm)]  # deny by default above
    for nr in nrs:
        prog += [(jeq_k, 0, 1, nr), (ret_k, 0, 0, errno_eperm)]
    # socket / socketpair: to the family check below; anything else is allowed
    sock = _SOCKET_CALLS[machine]
    prog += [(jeq_k, len(sock) - i, 0, n) for i, n in enumerate(sock)]  # a match jumps past the allow below
    prog.append((ret_k, 0, 0, allow))
    prog.append((ld_w_abs, 0, 0, 16))  # seccomp_data.args[0], its low 32 bits (little-endian): the family
    for fam in SOCKET_FAMILIES_ALLOWED:
        prog += [(jeq_k, 0, 1, fam), (ret_k, 0, 0, allow)]
    prog.append((ret_k, 0, 0, errno_eperm))
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # not inheritable until passed (pass_fds)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


@lru_cache(maxsize=1)
def _cgroup_roots() -> dict[str, str | None]:
    """Per controller ("pids", "memory"): a cgroup hierarchy this process may create groups in
    (cgroup v1 ``/sys/fs/cgroup/<controller>``, or v2 with the controller enabled); None elsewhere."""
    out: dict[str, str | None] = {}
    for ctl in ("pids", "memory", "cpu"):
        out[ctl] = None
        for root in (f"/sys/fs/cgroup/{ctl}", "/sys/fs/cgroup"):
            try:
                if root.endswith(ctl) or ctl in open(os.path.join(root, "cgroup.subtree_control")).read().split():
                    if os.path.exists(os.path.join(root, "cgroup.procs")) and os.access(root, os.W_OK):
                        out[ctl] = root
                        break
            except OSError:
                continue
    return out


_GROUP_IDS = count()  # unique cgroup names when several threads start sandboxes
SANDBOX_CPUS = 1.0  # the cpu controller's bound on one sandbox, in cores (where the hierarchy offers one)
_CPU_PERIOD_US = 100_000
_LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_limited_exec.py")


class _Cgroups:
    """One sandbox's cgroups, where they can be created: a pids group (namespaced processes map to
    the evaluator's uid, which RLIMIT_NPROC exempts when it is root, so a fork bomb is bounded here)
    and a memory group (RLIMIT_AS bounds each process; this bounds all of them together, with the
    tmpfs pages they write). The launcher joins them before exec (``paths``)."""

    def __init__(self, max_pids: int, memory_bytes: int):
        self.paths: list[str] = []
        self.memory: str | None = None  # the group whose events say whether the memory cap stopped a program
        roots = _cgroup_roots()
        _sweep_stale_groups(tuple(r for r in roots.values() if r))
        name = f"numlearn-sandbox-{os.getpid()}-{next(_GROUP_IDS)}-{time.monotonic_ns()}"
        v2 = roots["pids"] is not None and roots["pids"] == roots["memory"]
        # the cpu controller: the sandbox's processes together get at most SANDBOX_CPUS cores' time
        quota = str(int(SANDBOX_CPUS * _CPU_PERIOD_US))
        cpu = [("cpu.max", f"{quota} {_CPU_PERIOD_US}")] if v2 else [("cpu.cfs_period_us", str(_CPU_PERIOD_US)),
                                                                        ("cpu.cfs_quota_us", quota)]
        settings = {"cpu": cpu, "pids": [("pids.max", str(max_pids))],
                    "memory": ([("memory.max", str(memory_bytes)), ("memory.swap.max", "0")] if v2 else
                               [("memory.limit_in_bytes", str(memory_bytes)),
                                ("memory.memsw.limit_in_bytes", str(memory_bytes))])}
        for ctl, root in roots.items():
            if root is None or (v2 and ctl in ("memory", "cpu") and root == roots["pids"]):
                continue
            path = os.path.join(root, name)
            try:
                os.mkdir(path)
                extra = (settings["memory"] + (settings["cpu"] if roots["cpu"] == root else [])) if v2 else []
                for fname, value in settings[ctl] + extra:
                    fpath = os.path.join(path, fname)
                    if fname.startswith("memory.") and (fname.endswith("swap.max") or "memsw" in fname) \
                            and not os.path.exists(fpath):
                        continue  # no swap accounting here: nothing to bound
                    with open(fpath, "w") as f:
                        f.write(value)
                self.paths.append(path)
                if ctl == "memory" or v2:
                    self.memory = path
            except OSError:
                _rmdir_group(path)

    def oom_kills(self) -> int | None:
        """How many of the sandbox's processes the memory group's OOM killer ended (cgroup v2
        ``memory.events``, v1 ``memory.oom_control``): what the supervisor observed, which no program can
        write. None where there is no memory group or the kernel does not count kills (then a memory stop
        cannot be told from the program's own error)."""
        if self.memory is None:
            return None
        for fname in ("memory.events", "memory.oom_control"):
            try:
                with open(os.path.join(self.memory, fname)) as f:
                    fields = dict(line.split()[:2] for line in f if len(line.split()) >= 2)
            except OSError:
                continue
            if "oom_kill" in fields:
                return int(fields["oom_kill"])
        return None

    def close(self):
        for path in self.paths:
            _rmdir_group(path)
        self.paths = []


@lru_cache(maxsize=1)
def memory_stops_observed() -> bool:
    """Whether a sandbox here gets a memory group that counts its OOM kills: then the group is the memory
    cap and its kills are the memory stops; else RLIMIT_AS is the cap and no stop is counted as ours."""
    g = _Cgroups(8, 64 << 20)
    try:
        return g.oom_kills() is not None
    finally:
        g.close()


def _rmdir_group(path: str, patience_s: float = 15.0) -> bool:
    """Kill what is left in the group, wait until it is empty, remove it. A sandbox whose tmpfs holds
    ~300,000 files takes seconds to tear down (its mount namespace goes with its last process), longer
    than the 1 s this once waited, which left the group behind; what still outlasts ``patience_s`` is
    removed by the next start's ``_sweep_stale_groups``. True when the group is gone."""
    deadline, wait = time.monotonic() + patience_s, 0.01
    while True:
        try:
            pids = open(os.path.join(path, "cgroup.procs")).read().split()
        except OSError:
            return not os.path.isdir(path)
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass
        if not pids:
            try:
                os.rmdir(path)
                return True
            except OSError:
                pass
        if time.monotonic() > deadline:
            return False
        time.sleep(wait)
        wait = min(wait * 2, 0.25)


_SWEPT: set[str] = set()


def _sweep_stale_groups(roots: tuple[str, ...]) -> list[str]:
    """The janitor: remove ``numlearn-sandbox-<pid>-...`` groups whose creating evaluator (``<pid>``) is
    gone and that hold no process -- left behind by a teardown that outlasted its patience, or by a
    killed evaluator. Groups of live evaluators (this one included) are never touched. Once per root and
    process; returns what it removed."""
    removed = []
    for root in roots:
        if root in _SWEPT:
            continue
        _SWEPT.add(root)
        try:
            names = [n for n in os.listdir(root) if n.startswith("numlearn-sandbox-")]
        except OSError:
            continue
        for name in names:
            try:
                owner = int(name.split("-")[2])
            except (IndexError, ValueError):
                continue
            if owner == os.getpid() or _alive(owner):
                continue
            if _rmdir_group(os.path.join(root, name), patience_s=2.0):
                removed.append(os.path.join(root, name))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


@lru_cache(maxsize=1)
def isolation_status() -> tuple[bool, str]:
    """(available, description): bubblewrap present and able to start a namespaced interpreter
    as uid 65534 here. Probed once per process."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False, ("bubblewrap (bwrap) is not installed: `make sandbox` (apt-get install bubblewrap), or "
                       "eval.allow_unsafe_exec=true to run generated programs without an OS boundary")
    fds = []
    try:
        fds = [_memfd("guard.py", b"import os; print(os.getuid(), os.getpid())\n"), _memfd("seccomp", sandbox_seccomp())]
        r = subprocess.run(_bwrap_argv(sys.executable, {"guard.py": fds[0]}, fds[1]), cwd="/",
                           env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=30, pass_fds=fds)
        version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    except SandboxUnavailable as e:
        return False, str(e)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"bubblewrap could not run: {e}"
    finally:
        for fd in fds:
            os.close(fd)
    if r.returncode != 0 or r.stdout.split()[:1] != [str(NOBODY)]:
        msg = (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]
        return False, (f"bubblewrap cannot create the namespaces here ({msg}); enable unprivileged user "
                       "namespaces, or eval.allow_unsafe_exec=true to run without an OS boundary")
    roots = _cgroup_roots()
    pids = "pids cgroup" if roots["pids"] else "no pids cgroup: fork bombs end at the wall-clock kill"
    pids += f", cpu cgroup ({SANDBOX_CPUS:g} core)" if roots["cpu"] else ", no cpu cgroup (RLIMIT_CPU per process)"
    mem = ("memory cgroup (its OOM kills are the memory stops)" if memory_stops_observed() else
           "no memory cgroup that counts its kills: memory bounded per process, and a MemoryError counts as the "
           "program's own error")
    dev = "private /dev nodes" if _private_dev() is not None else "bwrap's /dev (host nodes, not ours to change)"
    return True, (f"{version}: user/mount/pid/net namespaces, no nested user namespaces, seccomp, uid {NOBODY}, "
                  f"read-only /proc/sys, {TMPFS_MB} MB tmpfs dirs, {dev}, pipes for the standard streams; {pids}; {mem}")


def _preexec(limits: dict[str, int], as_root: bool, drop_uid: bool):
    def fn():
        os.setsid()
        set_rlimits(limits)
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
                max_procs: int = 16, python: str | None = None, allow_unsafe: bool = False,
                start: Start | None = None) -> ProgramResult:
    """Run ``code`` as a Python program in the sandbox; return its stdout and status.

    ``ok`` is True only when the program exited with status 0 within ``timeout_s`` seconds of wall
    time. ``stdout`` holds at most ``max_output_bytes`` bytes; stderr is kept apart (a correct
    program that warns a lot still succeeds). Raises ``SandboxUnavailable`` when the OS boundary
    cannot be set up, unless ``allow_unsafe``.

    ``start``: how the program starts (``Start``: modules preloaded, and whether the clock starts after
    them); by default a bare interpreter whose start-up is inside the budget.
    """
    isolated, how = isolation_status()
    if not isolated and not allow_unsafe:
        raise SandboxUnavailable(how)
    start = start or Start()
    return _run_bwrap(code, timeout_s, memory_mb, max_output_bytes, max_procs, python, how, start) if isolated else \
        _run_process(code, timeout_s, memory_mb, max_output_bytes, max_procs, python, start)


@dataclass(frozen=True)
class Start:
    """How a sandboxed program starts. ``preload``: modules imported in the sandbox before the program
    (and before the audit hook), as in a child forked from a parent that had imported them.
    ``clock_after_preload``: the ``timeout_s`` budget starts once the interpreter is up and ``preload``
    imported (at most ``startup_timeout_s`` for that), so it measures the program, not our start-up."""

    preload: tuple[str, ...] = ()
    clock_after_preload: bool = False
    startup_timeout_s: float = 60.0

    @property
    def cpu_allowance(self) -> int:  # CPU seconds the start-up may take on top of the budget
        return 30 if self.preload else 0


@dataclass(frozen=True)
class _Seen:
    """What the supervisor observed of a run: the exit status, whether the clock ran out, when the run
    began (``time.monotonic``), its start-up seconds, and ``oom_kills`` (the memory group's OOM-kill count;
    None where no memory group observes it)."""

    rc: int | None
    timed_out: bool
    t0: float
    startup: float = 0.0
    oom_kills: int | None = None


class _Drain:
    """A pipe for one of the program's output streams, read by a thread of ours: the first ``keep`` bytes are
    kept, the rest is read and thrown away, so the program never writes to a host file (no host disk, no host
    inode it could ``fchmod``). Past ``keep``, ``on_overflow`` is called once (the caller stops the program:
    the output size limit)."""

    def __init__(self, keep: int, on_overflow=None):
        import threading

        self.keep, self.on_overflow, self.overflow = keep, on_overflow, False
        self.r, self.w = os.pipe()
        self.buf = bytearray()
        self.thread = threading.Thread(target=self._read, daemon=True, name="numlearn-sandbox-drain")
        self.thread.start()

    def _read(self) -> None:
        r = self.r
        while True:
            try:
                block = os.read(r, 1 << 16)
            except OSError:
                return
            if not block:
                return
            room = self.keep - len(self.buf)
            if room > 0:
                self.buf += block[:room]
            if len(block) > room and not self.overflow:
                self.overflow = True
                if self.on_overflow is not None:
                    self.on_overflow()

    def close_writer(self) -> None:
        """After the child has its copy: ours closed, so EOF comes when the sandbox's processes are gone."""
        if self.w is not None:
            os.close(self.w)
            self.w = None

    def result(self, wait_s: float = 5.0) -> bytes:
        """The kept bytes, once the stream ended (or ``wait_s`` passed: a process that escaped the kill and
        holds the pipe is given up on). Closes the pipe; a second call only returns the bytes."""
        self.close_writer()
        if self.r is not None:
            self.thread.join(wait_s)
            r, self.r = self.r, None
            os.close(r)  # the reader thread, if still blocked, gets EBADF and ends
        return bytes(self.buf)


def _empty_stdin() -> int:
    """The program's standard input: a pipe at end of file (not the host's ``/dev/null``, whose mode and times
    a program could change through fd 0). The caller closes it once the child has its copy."""
    r, w = os.pipe()
    os.close(w)
    return r


def _finish(out: bytes, err_bytes: bytes, seen: _Seen, timeout_s, max_output_bytes, isolation,
            overflow: bool = False) -> ProgramResult:
    """The program's result from what the supervisor observed (``seen``) and what it wrote (``out``, ``err_bytes``:
    the first bytes of each stream; ``overflow``: stdout passed its cap and the program was stopped for it). The
    stop kinds never come from the program's output or its exit code: a program can print "MemoryError" or
    exit with any status."""
    rc, timed_out, t0, startup, oom_kills = seen.rc, seen.timed_out, seen.t0, seen.startup, seen.oom_kills
    raw = out[: max_output_bytes + 1]
    err = err_bytes[:4000].decode("utf-8", "replace")
    truncated = len(raw) > max_output_bytes or overflow
    stdout = raw[:max_output_bytes].decode("utf-8", "replace")
    secs = time.monotonic() - t0
    res = ProgramResult(stdout, False, timed_out, "", rc, truncated, secs, isolation, startup_seconds=startup)
    res.memory_limited = bool(oom_kills) and not timed_out
    if timed_out:
        res.error = f"timed out after {timeout_s:g}s"
    elif res.memory_limited:
        res.error = "memory limit: the sandbox's memory cgroup killed it"
    elif overflow:
        res.error = "terminated: output size limit"
    elif rc == 97:
        res.error = "sandbox: could not isolate the network"
    elif rc == 96:
        res.error = "sandbox: could not apply the resource limits (" + (err.strip().splitlines() or ["?"])[-1][-200:] + ")"
    elif rc != 0:
        if rc is not None and rc < 0:
            sig = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
            res.error = "terminated: " + {"SIGXCPU": "CPU time limit", "SIGXFSZ": "output size limit",
                                          "SIGKILL": "killed", "SIGSEGV": "crashed"}.get(sig, sig)
        else:
            last = err.strip().splitlines()[-1] if err.strip() else f"exit status {rc}"
            res.error = last[-300:]
    elif truncated:
        res.error = "output size limit"
    else:
        res.ok = True
    return res


def _wait_ready(proc, workdir: str, start: Start) -> float:
    """With ``clock_after_preload``: wait until the guard has loaded the preloads and is about to
    run the program (its ``.ready`` file), the process ends, or ``startup_timeout_s`` passes;
    return the seconds waited (0 otherwise)."""
    if not start.clock_after_preload:
        return 0.0
    t0 = time.monotonic()
    marker = os.path.join(workdir, ".ready")
    while time.monotonic() - t0 < start.startup_timeout_s:
        if os.path.exists(marker) or proc.poll() is not None:
            break
        time.sleep(0.005)
    return time.monotonic() - t0


def _wait_then_kill(proc, timeout_s: float, after_kill=None) -> tuple[int | None, bool]:
    """Wait up to ``timeout_s``, then kill the process group whatever happened (children that
    outlived the program go too); return (exit status or None, timed out)."""
    timed_out, rc = False, None
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if after_kill is not None:
            after_kill()
    if rc is None:
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            rc = None
    return rc, timed_out


def _remove_tree(path: str) -> None:
    """``shutil.rmtree``, which recurses in Python (1,500 nested dirs raise RecursionError), then
    ``rm -rf`` for what it left."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        pass
    if os.path.exists(path):
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


def _workdir(code: str, start: Start | None = None) -> str:
    """A fresh directory holding the program and the guard that runs it (and what to preload)."""
    tmp = tempfile.mkdtemp(prefix="numlearn-pot-")
    files = [("program.py", code), ("guard.py", _GUARD)]
    if start is not None and start.preload:
        files.append(("preload.json", json.dumps(list(start.preload))))
    for name, text in files:
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write(text)
    return tmp


def _run_bwrap(code, timeout_s, memory_mb, max_output_bytes, max_procs, python, how,
               start: Start = Start()) -> ProgramResult:
    t0 = time.monotonic()
    # stdout/stderr files live outside the sandbox's view; each is capped by RLIMIT_FSIZE, which is
    # set well above the stdout cap so stderr chatter cannot fail a correct program.
    # the whole sandbox, not each process: its processes (+ bwrap's own) and its memory, tmpfs pages
    # included, where cgroups can be created; the rlimits bound each process in any case
    groups = _Cgroups(max_procs + 4, (memory_mb + 3 * TMPFS_MB) << 20)
    # Where the memory group counts its OOM kills, it is the memory cap (a stop the supervisor sees) and
    # RLIMIT_AS only a backstop well above it; elsewhere RLIMIT_AS is the cap, and a MemoryError it causes
    # cannot be told from one the program raised: it counts as the program's error.
    observed = groups.oom_kills() is not None
    limits = {"cpu": int(timeout_s) + 1 + start.cpu_allowance,
              "mem": (AS_BACKSTOP * (memory_mb + 3 * TMPFS_MB) if observed else memory_mb) << 20,
              "fsize": max(16 << 20, max_output_bytes + 1)}
    files = {"program.py": code.encode("utf-8", "surrogatepass"), "guard.py": _GUARD.encode()}
    if start.preload:
        files["preload.json"] = json.dumps(list(start.preload)).encode()
    fds = {name: _memfd(name, data) for name, data in files.items()}
    seccomp = _memfd("seccomp", sandbox_seccomp())
    ready_r, ready_w = os.pipe()
    # the standard streams are pipes to this process (stdin at end of file): no host file, device or disk
    proc_ref: list = []
    out = _Drain(max_output_bytes + 1, lambda: _killpg(proc_ref))
    err = _Drain(4000)
    stdin = _empty_stdin()
    passed = (*fds.values(), seccomp, ready_w)
    try:
        try:
            # bwrap gets no environment of ours: inside, it is pid 1, and its environ is readable
            # there (the evaluator's secrets would be); the program's is --setenv. No preexec_fn
            # (unsafe in a threaded parent): a launcher interpreter joins the cgroups, a fresh
            # session keyring, sets the rlimits and execs bwrap.
            argv = [sys.executable, "-I", "-S", _LAUNCHER, json.dumps(limits), ",".join(groups.paths), "--",
                    *_bwrap_argv(python or sys.executable, fds, seccomp, {"NUMLEARN_READY_FD": str(ready_w)})]
            proc = subprocess.Popen(argv, cwd="/", env={"PATH": "/usr/bin:/bin"}, stdin=stdin,
                                    stdout=out.w, stderr=err.w, start_new_session=True, close_fds=True,
                                    pass_fds=passed)
            proc_ref.append(proc)
        except (OSError, subprocess.SubprocessError) as e:
            return ProgramResult("", False, error=f"could not start sandbox: {e}", isolation=how)
        finally:
            for fd in (*passed, stdin):
                os.close(fd)
            passed = ()
            out.close_writer()
            err.close_writer()
        startup = _wait_ready_pipe(proc, ready_r, start)
        rc, timed_out = _wait_then_kill(proc, timeout_s)  # bwrap's group and its pid namespace
        return _finish(out.result(), err.result(), _Seen(rc, timed_out, t0, startup, groups.oom_kills()), timeout_s,
                       max_output_bytes, how, overflow=out.overflow and not timed_out)
    finally:
        for fd in passed:
            os.close(fd)
        out.result(0.0)
        err.result(0.0)
        os.close(ready_r)
        groups.close()


def _killpg(proc_ref: list) -> None:
    """Kill the sandbox's process group (its output passed the cap); the supervisor's wait then returns."""
    if proc_ref:
        try:
            os.killpg(proc_ref[0].pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_ready_pipe(proc, ready_r: int, start: Start) -> float:
    """``_wait_ready`` for bwrap: the guard writes one byte to the ready pipe (EOF: it ended)."""
    if not start.clock_after_preload:
        return 0.0
    import select

    t0 = time.monotonic()
    while (left := start.startup_timeout_s - (time.monotonic() - t0)) > 0:
        r, _, _ = select.select([ready_r], [], [], min(left, 0.5))
        if r or proc.poll() is not None:
            break
    return time.monotonic() - t0


def _run_process(code, timeout_s, memory_mb, max_output_bytes, max_procs, python,
                 start: Start = Start()) -> ProgramResult:
    """The process-level fallback (``allow_unsafe``): not a boundary."""
    global _UID_DROP_WORKS
    as_root = os.geteuid() == 0
    tmp = _workdir(code, start)
    t0 = time.monotonic()
    try:
        if as_root:
            os.chown(tmp, SANDBOX_UID, SANDBOX_UID)
            os.chmod(tmp, 0o700)
        env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
               "PYTHONDONTWRITEBYTECODE": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        limits = {"cpu": int(timeout_s) + 1 + start.cpu_allowance, "mem": memory_mb * 1024 * 1024,
                  "fsize": max_output_bytes + 1,
                  "nproc": max_procs if not as_root else 4096}
        proc_ref: list = []
        out, err = _Drain(max_output_bytes + 1, lambda: _killpg(proc_ref)), _Drain(4000)
        stdin = _empty_stdin()
        argv = [python or sys.executable, "-I", "-B", "guard.py"]
        drop = as_root and _UID_DROP_WORKS is not False
        try:
            try:
                # _preexec makes it a session (and group) leader: an output past the cap stops the group
                proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=stdin, stdout=out.w, stderr=err.w,
                                        preexec_fn=_preexec(limits, as_root, drop), close_fds=True)
                if drop:
                    _UID_DROP_WORKS = True
            except PermissionError:
                if not drop:
                    raise
                _UID_DROP_WORKS = False  # interpreter not reachable by the sandbox uid
                proc = subprocess.Popen(argv, cwd=tmp, env=env, stdin=stdin, stdout=out.w, stderr=err.w,
                                        preexec_fn=_preexec(limits, as_root, False), close_fds=True)
            proc_ref.append(proc)
        except (OSError, subprocess.SubprocessError) as e:
            out.result(0.0)
            err.result(0.0)
            return ProgramResult("", False, error=f"could not start sandbox: {e}")
        finally:
            os.close(stdin)
            out.close_writer()
            err.close_writer()
        startup = _wait_ready(proc, tmp, start)
        rc, timed_out = _wait_then_kill(
            proc, timeout_s, (lambda: _kill_uid_processes(SANDBOX_UID)) if drop and _UID_DROP_WORKS else None)
        res = _finish(out.result(), err.result(), _Seen(rc, timed_out, t0, startup), timeout_s, max_output_bytes,
                      "process (unsafe)", overflow=out.overflow and not timed_out)
        if rc == 97 and not as_root:
            res.error = f"exit status {rc}"
        return res
    finally:
        _remove_tree(tmp)
