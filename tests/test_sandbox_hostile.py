"""Hostile programs against the operating-system boundary (bubblewrap namespaces).

Every program first switches the in-process audit hook off (the bypass reported against the old
sandbox: its ``__code__`` replaced through ``gc``), so what is tested is the OS boundary alone.
Each case asserts that the attack failed and that the evaluator's next program runs normally.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from numlearn.evaluation.sandbox import NOBODY, SandboxUnavailable, isolation_status, run_program

REPO = Path(__file__).resolve().parents[1]
ISOLATED, HOW = isolation_status()
pytestmark = pytest.mark.skipif(not ISOLATED, reason=f"no OS sandbox here: {HOW}")

BYPASS = """import gc, sys
for _o in gc.get_objects():
    if callable(_o) and getattr(_o, "__name__", "") == "_hook":
        _o.__code__ = (lambda event, args: None).__code__
"""


def _run(body: str, **kw):
    r = run_program(BYPASS + body, **kw)
    after = run_program("print(6 * 7)")
    assert after.ok and after.stdout.strip() == "42", f"the evaluator's next program failed: {after}"
    return r


def _blocked(r, *needles):
    """The attack failed: it raised (not ok) and printed none of ``needles``."""
    assert not r.ok or not any(n in r.stdout for n in needles), r
    for n in needles:
        assert n not in r.stdout, r


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("host") / "answers.txt"
    p.write_text("SECRET-ANSWER-4242\n")
    return p


def test_the_audit_hook_really_is_off_in_these_programs():
    r = run_program(BYPASS + "import os\nos.system('echo spawned')")
    assert r.ok and "spawned" in r.stdout  # without the OS layer, nothing else would stop this


# ---------------------------------------------------------------- what it can see
@pytest.mark.parametrize("path", [
    "{secret}", str(REPO / "README.md"), str(REPO / "src" / "numlearn" / "evaluation" / "sandbox.py"),
    str(REPO / "data_cache"), "/etc/shadow", "/etc/passwd", "/root/.bashrc",
    str(Path.home() / ".netrc"), "/proc/1/root/etc/shadow",
])
def test_host_files_are_not_visible(path, secret_file):
    path = path.format(secret=secret_file)
    r = _run(f"import os\nprint(open({path!r}).read()[:100] if os.path.isfile({path!r}) else "
             f"os.listdir({path!r}))")
    _blocked(r, "SECRET-ANSWER", "root:", "def run_program", "synthetic", "main")


def test_benchmark_files_are_not_visible(data_dir):
    path = str(data_dir / "benchmarks" / "gsm8k" / "gsm8k.jsonl")
    _blocked(_run(f"print(open({path!r}).read(200))"), "question")


def test_the_filesystem_holds_only_the_interpreter():
    r = _run("import os\nprint(sorted(os.listdir('/')))\nprint(sorted(os.listdir('/tmp')))\n"
             "print(os.path.exists('/etc'), os.path.exists('/sys'), os.path.exists('/home'))")
    top = eval(r.stdout.splitlines()[0])
    # The only top-level entries besides the system ones are the first components of the
    # interpreter / venv paths (a CI clone may live under /check, /work, /root, /tmp ...).
    interpreter_roots = {Path(p).parts[1] for p in
                         (sys.prefix, os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix))}
    allowed = {"usr", "bin", "lib", "lib64", "sbin", "proc", "dev", "tmp", "sandbox"} | interpreter_roots
    assert set(top) <= allowed, set(top) - allowed
    assert not {"etc", "home", "sys", "var", "opt", "srv", "mnt"} & set(top)
    tmp_entries = eval(r.stdout.splitlines()[1])
    # a private /tmp: empty but for the mount point of a venv that lives under the host's /tmp
    assert tmp_entries == [] or (len(tmp_entries) == 1 and sys.prefix.startswith(f"/tmp/{tmp_entries[0]}"))
    assert r.stdout.splitlines()[2] == "False False False"
    # the mount points leading to the read-only interpreter / venv hold nothing else
    venv_parent = Path(sys.prefix).parent
    r = _run(f"import os\nprint(sorted(os.listdir({str(venv_parent)!r})))")
    assert eval(r.stdout) == [Path(sys.prefix).name]


def test_runs_as_an_unprivileged_uid_without_capabilities():
    r = _run("import os\nprint(os.getuid(), os.getgid())\n"
             "print([l for l in open('/proc/self/status') if l.startswith('CapEff')][0].split()[1])")
    uid, gid = r.stdout.split()[:2]
    assert (int(uid), int(gid)) == (NOBODY, NOBODY) and int(r.stdout.split()[2], 16) == 0


def test_the_evaluators_environment_is_not_visible(monkeypatch):
    monkeypatch.setenv("NUMLEARN_TEST_SECRET", "hunter2")
    r = _run("import os, glob\nfor p in glob.glob('/proc/*/environ'):\n"
             "    try: print(open(p, 'rb').read())\n    except OSError: pass\nprint(dict(os.environ))")
    _blocked(r, "hunter2")


# ---------------------------------------------------------------- what it can do to the evaluator
def test_cannot_see_host_processes():
    r = _run("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    assert r.ok and max(eval(r.stdout)) < 50  # its own pid namespace
    assert str(os.getpid()) not in r.stdout.split(",") or os.getpid() < 50


@pytest.mark.parametrize("attack", [
    "os.kill({pid}, signal.SIGKILL)",
    "os.kill(os.getppid(), signal.SIGKILL)",
    "os.killpg(0, signal.SIGKILL)",
    "signal.pidfd_send_signal(os.pidfd_open({pid}), signal.SIGKILL)",
    "resource.prlimit({pid}, resource.RLIMIT_NOFILE, (1, 1))",
    "os.setpriority(os.PRIO_PROCESS, {pid}, 19)",
    "ctypes.CDLL(None).kill({pid}, 9); print('sent')",
    "ctypes.CDLL(None).ptrace(16, {pid}, 0, 0); print('attached')",
])
def test_cannot_touch_the_evaluator(attack):
    pid = os.getpid()
    before = (os.getpriority(os.PRIO_PROCESS, pid), __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE))
    _run("import os, signal, resource, ctypes\n" + attack.format(pid=pid) + "\nprint('done')")
    after = (os.getpriority(os.PRIO_PROCESS, pid), __import__("resource").getrlimit(__import__("resource").RLIMIT_NOFILE))
    assert before == after  # not reniced, limits untouched; and this process is alive to check


def test_a_detached_child_dies_with_the_program():
    marker = "37.777"
    _run(f"import subprocess\nsubprocess.Popen(['sleep', '{marker}'], start_new_session=True)\nprint('started')")
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {marker}" not in ps


def test_multiprocessing_children_stay_inside(secret_file):
    path = str(secret_file)
    r = _run("import multiprocessing as mp, os\n"
             "ctx = mp.get_context('fork')\n"
             f"p = ctx.Process(target=os.system, args=('test -e {path} && echo CHILD-SEES || echo CHILD-RAN',))\n"
             "p.start(); p.join()")
    assert "CHILD-RAN" in r.stdout and "CHILD-SEES" not in r.stdout


def test_fork_exec_and_setuid_do_not_escalate():
    r = _run("import _posixsubprocess, os, subprocess\nprint(subprocess.run(['id', '-u'], capture_output=True, "
             "text=True).stdout.strip())\ntry:\n    os.setuid(0); print('became root')\nexcept OSError as e:\n"
             "    print('setuid refused')")
    assert "became root" not in r.stdout and (not r.stdout or r.stdout.split()[0] == str(NOBODY))


# ---------------------------------------------------------------- network
def test_no_route_to_a_host_listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    srv.settimeout(3)
    port = srv.getsockname()[1]
    got = []
    t = threading.Thread(target=lambda: got.append(_accept(srv)))
    t.start()
    r = _run(f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\ns.sendall(b'leak')\n"
             "print('connected')")
    t.join()
    srv.close()
    assert "connected" not in r.stdout and got == [None]


def _accept(srv):
    try:
        conn, _ = srv.accept()
        return conn.recv(10)
    except OSError:
        return None


@pytest.mark.parametrize("attack", [
    "socket.getaddrinfo('pypi.org', 443)",
    "open('/proc/%d/ns/net')",
    "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0).bind((0, 0)); print(open('/proc/net/dev').read())",
])
def test_network_namespace_holds(attack):
    r = _run("import socket, os\n" + (attack % os.getpid() if "%d" in attack else attack) + "\nprint('reached')")
    if "/proc/net/dev" in attack:
        assert "eth" not in r.stdout and "ens" not in r.stdout  # only its own loopback
    else:
        _blocked(r, "reached")


# ---------------------------------------------------------------- the filesystem it is given
@pytest.mark.parametrize("attack", [
    "open(sys.executable, 'ab').write(b'x')",
    "os.open(sys.executable, os.O_RDONLY | os.O_TRUNC)",
    "os.utime(sys.executable, (0, 0))",
    "os.chmod(sys.executable, 0o777)",
    "os.mkfifo('/usr/numlearn-fifo')",
    "os.open('evil.so', os.O_WRONLY | os.O_CREAT, dir_fd=os.open('/usr/lib', os.O_RDONLY))",
    "open(os.path.join(sys.prefix, 'pyvenv.cfg'), 'w').write('x')",
    "os.rename(sys.executable, '/sandbox/py')",
    "ctypes.CDLL(None).mount(b'none', b'/usr', b'tmpfs', 0, None) == 0 and print('mounted')",
    "ctypes.CDLL(None).unshare(0x10000000) == 0 and os.setuid(0) is None and print('root again')",
])
def test_read_only_interpreter_and_no_mounts(attack):
    before = Path(sys.executable).stat()
    r = _run("import os, sys, ctypes\n" + attack + "\nprint('done')")
    _blocked(r, "mounted", "root again")
    after = Path(sys.executable).stat()
    assert (before.st_size, before.st_mtime, before.st_mode) == (after.st_size, after.st_mtime, after.st_mode)


def test_a_program_can_write_its_own_files_and_they_vanish():
    r = _run("open('scratch.txt', 'w').write('ok')\nprint(open('scratch.txt').read())")
    assert r.ok and r.stdout.strip() == "ok"


# ---------------------------------------------------------------- resources
@pytest.mark.parametrize("body,limit", [
    ("while True:\n    pass", "timed out"),
    ("x = bytearray(8 << 30)", ""),
    ("import os\nwhile True:\n    os.fork()", ""),
    ("open('big', 'wb').write(b'0' * (64 << 20))", "File too large"),  # RLIMIT_FSIZE; Python ignores SIGXFSZ
])
def test_resource_attacks_are_contained(body, limit):
    r = _run(body, timeout_s=2)
    assert not r.ok and limit in r.error


def test_stderr_does_not_count_against_stdout():
    r = _run("import sys\nprint(42)\nsys.stderr.write('warning: ' * 30000)")
    assert r.ok and r.stdout.strip() == "42"


# ---------------------------------------------------------------- failing closed
def test_refuses_without_isolation_unless_the_user_opts_in(monkeypatch):
    from numlearn.evaluation import sandbox

    monkeypatch.setattr(sandbox, "isolation_status", lambda: (False, "bubblewrap is not installed: make sandbox"))
    with pytest.raises(SandboxUnavailable, match="make sandbox"):
        sandbox.run_program("print(1)")
    r = sandbox.run_program("print(1)", allow_unsafe=True)
    assert r.ok and r.isolation == "process (unsafe)"


def test_an_interpreter_under_the_hosts_tmp_still_runs(tmp_path):
    """A CI clone lives under /tmp: the sandbox's own /tmp must not hide its venv."""
    import venv

    root = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    r = run_program("import sys\nprint(sys.prefix)", python=str(root / "bin" / "python"))
    assert r.ok and r.stdout.strip() == str(root), r


# ---------------------------------------------------------------- several sandboxes at once
def test_concurrent_programs_keep_their_own_results_and_limits():
    """Eight programs in flight: a sleeper times out and a fork bomb hits its pids limit without
    touching the neighbours, and every other program prints its own answer."""
    from numlearn.evaluation.runner import ProgramExecutor

    codes = [f"print({i} * 7)" for i in range(12)]
    codes[3] = "import time\ntime.sleep(30)"
    codes[7] = BYPASS + "import os\nwhile True:\n    os.fork()"
    with ProgramExecutor(timeout_s=3.0, workers=8) as ex:
        assert ex.workers == 8
        runs = ex.run(codes)
    for i, r in enumerate(runs):
        if i == 3:
            assert not r["ok"] and "timed out" in r["error"]
        elif i == 7:
            assert not r["ok"]
        else:
            assert r["ok"] and r["output"].strip() == str(i * 7), (i, r)


def test_the_launcher_fails_closed(tmp_path):
    """Limits that cannot be applied mean the program never runs (exit 96 before exec)."""
    launcher = Path(__import__("numlearn.evaluation.sandbox", fromlist=["_LAUNCHER"])._LAUNCHER)
    marker = tmp_path / "ran"
    argv = [sys.executable, "-I", "-S", str(launcher), '{"cpu": 5, "mem": 1073741824, "fsize": 65536}',
            str(tmp_path / "no-such-cgroup"), "--", "/usr/bin/touch", str(marker)]
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 96 and "sandbox launcher" in r.stderr and not marker.exists()
    ok = subprocess.run(argv[:5] + ["", "--", "/usr/bin/touch", str(marker)])
    assert ok.returncode == 0 and marker.exists()
