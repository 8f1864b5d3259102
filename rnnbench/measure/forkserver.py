"""Fresh measurement processes without paying the frameworks' import in each one.

A study runs every measurement in a process of its own, about a hundred of them for `make run`,
and a fresh interpreter spends one to three seconds importing torch (and jax) before it times
anything.  A fork server imports them once and forks a child per job, the way
`multiprocessing`'s "forkserver" start method does: the child is a new process (its own pid,
session, memory, thread pools, allocator state and compile cache lookups) that starts with the
modules imported and nothing else done.  What the server may import before forking is only what
starts no thread pool and reads no per-job setting: importing torch or jax initialises neither
OpenMP's threads nor XLA's backend (both start lazily, in the child, with the job's thread
environment; the server itself runs with that same environment, a server per environment).
Whatever else a job needs (flax, the rungs, the compiler) the child imports itself, so its first
call and memory are what a fresh interpreter would measure, less the import.

    server = ForkServer(env, preload=("numpy", "torch"))
    child = server.spawn("rnnbench.measure.worker", [...], env=env, stdout=..., stderr=..., cwd=...)
    child.poll() / child.wait() / child.pid / child.returncode   (as subprocess.Popen's)

The server is `python -m rnnbench.measure.forkserver MODULE...`: it imports the modules, says
"ready", then for each request line (JSON) forks, answers the child's pid, waits for it and
answers its exit code (negative: the signal that killed it), one child at a time.  It exits when
its standard input closes (the runner finished or died).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time

SERVER = "rnnbench.measure.forkserver"


class ServerGone(RuntimeError):
    """The fork server exited; the job is run in a fresh interpreter instead."""


class ForkServer:
    def __init__(self, env: dict, preload: tuple[str, ...], cwd=None, start_timeout: float = 300.0):
        self.preload = tuple(preload)
        self.proc = subprocess.Popen([sys.executable, "-m", SERVER, *self.preload], cwd=cwd, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        self._buffer = b""
        line = self._read_line(start_timeout)
        if line != {"ready": True}:
            self.close()
            raise ServerGone(f"the fork server did not start (it said {line!r})")

    def _read_line(self, timeout: float | None) -> dict | None:
        """The server's next answer; None if none came within `timeout` s (None: wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ServerGone("the fork server exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, module: str, argv: list[str], *, env: dict, stdout, stderr, cwd) -> "Forked":
        """Fork a child that runs `python -m MODULE ARGV...` with `env`, writing to the files
        `stdout` and `stderr`, in a session of its own (so its process group can be killed)."""
        request = dict(module=module, argv=list(argv), env=dict(env), stdout=str(stdout), stderr=str(stderr),
                       cwd=str(cwd))
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise ServerGone(f"the fork server exited ({e})") from None
        answer = self._read_line(60.0)
        if not answer or "pid" not in answer:
            raise ServerGone(f"the fork server did not fork (it said {answer!r})")
        return Forked(self, answer["pid"])

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Forked:
    """A forked child, seen like a subprocess.Popen: pid, poll(), wait(), returncode."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def _answer(self, timeout: float | None) -> int | None:
        if self.returncode is None:
            try:
                answer = self.server._read_line(timeout)
            except ServerGone:  # the child was orphaned; the runner kills its group
                answer = {"pid": self.pid, "returncode": -9}
            if answer is not None:
                assert answer.get("pid") == self.pid, answer
                self.returncode = answer["returncode"]
        return self.returncode

    def poll(self) -> int | None:
        return self._answer(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._answer(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout)
        return code


class ForkServers:
    """One server per (environment, preload), started on first use; close() ends them all.

    A server that cannot start (or dies) is not retried: `spawn` returns None and the caller
    starts a fresh interpreter, as it would without a server."""

    def __init__(self, cwd=None):
        self.cwd, self._servers = cwd, {}

    def spawn(self, preload: tuple[str, ...], module: str, argv: list[str], *, env: dict, stdout, stderr,
              cwd) -> Forked | None:
        key = (tuple(sorted(env.items())), tuple(preload))
        server = self._servers.get(key)
        if key not in self._servers:
            try:
                server = ForkServer(env, preload, cwd=cwd)
            except ServerGone:
                server = None
            self._servers[key] = server
        if server is None:
            return None
        try:
            return server.spawn(module, argv, env=env, stdout=stdout, stderr=stderr, cwd=cwd)
        except ServerGone:
            self._servers[key] = None
            server.close()
            return None

    def close(self) -> None:
        for server in self._servers.values():
            if server is not None:
                server.close()
        self._servers.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_file_pages() -> list[tuple[int, int]]:
    """This process's resident pages of readable file mappings (the libraries' code and data
    that importing touched), as (address, pages) runs; [] where /proc cannot say.

    A forked child starts with these pages out of its page tables (Linux copies only the
    anonymous ones), so its RSS would count less than a fresh interpreter's after the same
    imports, and its net memory (peak less that start) would count the library pages its first
    calls touch again.  The child touches them (`_touch`), which costs a few tens of ms, and so
    starts with the RSS a fresh interpreter would have."""
    import numpy as np

    runs = []
    try:
        with open("/proc/self/maps") as maps, open("/proc/self/pagemap", "rb") as pagemap:
            for line in maps:
                fields = line.split()
                if len(fields) < 6 or "r" not in fields[1] or fields[4] == "0" or fields[5].startswith("["):
                    continue
                start, end = (int(x, 16) for x in fields[0].split("-"))
                pagemap.seek(start // PAGE * 8)
                entries = np.frombuffer(pagemap.read((end - start) // PAGE * 8), dtype=np.uint64)
                present = np.concatenate(([0], (entries >> np.uint64(63)).astype(np.int8), [0]))
                edges = np.flatnonzero(np.diff(present))
                runs += [(start + int(a) * PAGE, int(b - a)) for a, b in zip(edges[::2], edges[1::2])]
    except (OSError, ValueError):
        return []
    return runs


def _touch(runs: list[tuple[int, int]]) -> None:
    import ctypes

    import numpy as np

    for address, pages in runs:
        view = np.ctypeslib.as_array((ctypes.c_uint8 * (pages * PAGE)).from_address(address))
        int(view[::PAGE].sum())


def _child(request: dict, control: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGV` in a session of its own; never returns."""
    code = 1
    try:
        os.setsid()
        _touch(request["resident"])
        for fd in control:  # the server's channel to the runner is not the child's
            os.close(fd)
        os.chdir(request["cwd"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        sys.stdout, sys.stderr = (os.fdopen(fd, "w", buffering=1, closefd=False) for fd in (1, 2))
        os.environ.clear()
        os.environ.update(request["env"])
        import runpy

        sys.argv = [request["module"], *request["argv"]]
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()  # what an interpreter's exit runs (compile worker pools' shutdown)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(preload: list[str]) -> int:
    import importlib

    # Our answers go to the runner on a copy of stdout; what a module prints goes to stderr.
    answers = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    for name in preload:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- the child imports it again and reports why it fails
            pass

    def answer(**kw):
        answers.write(json.dumps(kw).encode() + b"\n")

    resident = resident_file_pages()
    answer(ready=True)
    while True:
        line = requests.readline()
        if not line:
            return 0
        request = dict(json.loads(line), resident=resident)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, [answers.fileno(), requests.fileno()])
        answer(pid=pid)
        _, status = os.waitpid(pid, 0)
        answer(pid=pid, returncode=os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
