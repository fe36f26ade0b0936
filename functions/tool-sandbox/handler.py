"""The tool-sandbox function (Python runtime, no IAM permissions): one custom tool call per invocation.

The agent runner (shared/agent-runtime/src/tools/python.rs) invokes it with
{"script", "arguments", "shared_outputs", "limits"} and gets {"ok": value} or {"error": message}:
the contract, limits and messages of the local executor. As there, the tool runs in a child
process running harness.py (the same file; it applies the CPU and memory limits, drops
privileges and closes the network), with
- an empty environment: none of this function's variables (its session credentials) reach it;
- an empty directory of its own as working directory, removed afterwards;
- the call's wall-clock limit, after which everything it started is killed;
- stdout read up to the output limit.

Beyond the local executor, because a warm environment serves one tenant's call after another's:
- this process is not dumpable, so the tool (the same Unix user) cannot read its environment or
  memory through /proc/PID/environ or /proc/PID/mem;
- it is the subreaper of whatever the tool starts, and kills all of it before answering: nothing
  outlives its call;
- in Lambda, everything left in the temporary directory (/tmp) is removed after each call.
"""

import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

HARNESS = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py"), encoding="utf-8").read()

# The runner's defaults (python.rs SandboxLimits), for a request that leaves one out.
DEFAULT_LIMITS = {
    "wall_time_ms": 30_000,
    "cpu_seconds": 20,
    "memory_bytes": 512 * 1024 * 1024,
    "max_output_bytes": 1024 * 1024,
    "allow_network": False,
}
# Kept of the invocation's remaining time to kill the tool, clean up and answer.
RESERVE_MS = 3_000
STDERR_BYTES = 4096

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/PID/environ and mem of this process are closed to the tool
_libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what the tool leaves behind becomes this process's child
_log = logging.getLogger("tool-sandbox")


class InvalidRequest(Exception):
    """The event is not the runner's request."""


def handler(event, context):
    """One tool call: `{"ok": value}` or `{"error": message}`; raises only on a bug of its own."""
    started = time.monotonic()
    try:
        request, limits = read_event(event)
    except InvalidRequest as error:
        return {"error": f"the tool sandbox got an invalid request ({error})"}
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is not None:
        limits["wall_time_ms"] = max(1, min(limits["wall_time_ms"], remaining() - RESERVE_MS))
    try:
        answer = run_tool(request, limits)
    finally:
        if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
            clear_directory(tempfile.gettempdir())
    _log.info("tool call: %s in %d ms", "ok" if "ok" in answer else "error", (time.monotonic() - started) * 1000)
    return answer


def read_event(event):
    """The request for the harness and the limits, checked."""
    if not isinstance(event, dict):
        raise InvalidRequest("not a JSON object")
    script = event.get("script")
    if not isinstance(script, str):
        raise InvalidRequest("script is not a string")
    arguments = event.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise InvalidRequest("arguments is not an object")
    shared_outputs = event.get("shared_outputs")
    if shared_outputs is not None and not isinstance(shared_outputs, list):
        raise InvalidRequest("shared_outputs is not a list")
    given = event.get("limits") or {}
    if not isinstance(given, dict):
        raise InvalidRequest("limits is not an object")
    limits = dict(DEFAULT_LIMITS)
    for name, default in DEFAULT_LIMITS.items():
        value = given.get(name, default)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise InvalidRequest(f"limits.{name} is not a boolean")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidRequest(f"limits.{name} is not a positive integer")
        limits[name] = value
    return {"script": script, "arguments": arguments, "shared_outputs": shared_outputs}, limits


def run_tool(request, limits):
    """Runs the harness in its own directory; the answer as the local executor gives it."""
    try:
        directory = tempfile.mkdtemp(prefix="tool-sandbox-")
    except OSError as error:
        return {"error": f"the sandbox could not start ({error})"}
    try:
        return run_in(directory, request, limits)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def run_in(directory, request, limits):
    settings = {
        "cpu": limits["cpu_seconds"],
        "memory": limits["memory_bytes"],
        "network": limits["allow_network"],
        "share": request["shared_outputs"] is not None,
    }
    try:
        child = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", HARNESS, json.dumps(settings)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=child_environment(),
            cwd=directory,
            start_new_session=True,
        )
    except OSError as error:
        return {"error": f"the sandbox could not start python3 ({error})"}
    try:
        finished = exchange(child, json.dumps(request).encode(), limits)
    finally:
        end_everything(child)
    if finished is None:
        return {"error": f"the tool did not finish within {limits['wall_time_ms'] // 1000} seconds"}
    (out, overflow), (err, _), status = finished
    if overflow:
        return {"error": f"the tool wrote more than {limits['max_output_bytes']} bytes"}
    return read_answer(out, err, status)


def child_environment():
    """PATH and LANG only, as locally. A shared build of the interpreter (Lambda's, in /var/lang)
    also needs its own library directory to start."""
    environment = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    library = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        environment["LD_LIBRARY_PATH"] = library
    return environment


def exchange(child, payload, limits):
    """Writes the request, reads stdout (bounded) and stderr to their ends and waits for the
    child, all within the wall-clock limit: `((out, overflow), (err, overflow), returncode)`,
    or None when the limit passed first."""
    deadline = time.monotonic() + limits["wall_time_ms"] / 1000
    results = {}

    def write():
        # A script that never reads stdin must not block the reads: the write has its own thread.
        try:
            child.stdin.write(payload)
        except OSError:
            pass
        finally:
            try:
                child.stdin.close()
            except OSError:
                pass

    def read(name, stream, limit):
        results[name] = read_bounded(stream, limit)

    threads = [
        threading.Thread(target=write, daemon=True),
        threading.Thread(target=read, args=("out", child.stdout, limits["max_output_bytes"]), daemon=True),
        threading.Thread(target=read, args=("err", child.stderr, STDERR_BYTES), daemon=True),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    if any(thread.is_alive() for thread in threads):
        return None
    try:
        status = child.wait(max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None
    return results["out"], results["err"], status


def read_bounded(stream, limit):
    """Reads to the end, keeping at most `limit` bytes; draining the rest keeps a talkative child
    from blocking on a full pipe (the wall-clock limit still ends it)."""
    kept = bytearray()
    overflow = False
    while True:
        try:
            chunk = stream.read1(65536)
        except (OSError, ValueError):
            break
        if not chunk:
            break
        room = limit - len(kept)
        overflow |= len(chunk) > room
        kept += chunk[: max(room, 0)]
    return bytes(kept), overflow


def read_answer(out, err, status):
    """The harness's JSON answer, or why there is none."""
    try:
        answer = json.loads(out)
    except ValueError:
        detail = err.decode("utf-8", "replace").strip()[:300]
        return {"error": f"the tool stopped without an answer ({describe_status(status)}) {detail}".strip()}
    if isinstance(answer, dict):
        if "error" in answer:
            if isinstance(answer["error"], str):
                return {"error": answer["error"]}
        elif "ok" in answer:
            return {"ok": answer["ok"]}
    return {"error": "the tool's answer could not be read"}


def describe_status(status):
    """An exit status as Rust's ExitStatus shows it (the local executor's wording)."""
    if status < 0:
        try:
            return f"signal: {-status} ({signal.Signals(-status).name})"
        except ValueError:
            return f"signal: {-status}"
    return f"exit status: {status}"


def end_everything(child):
    """Kills the tool's process group, then every process it left behind (reparented to this
    process, the subreaper), reaps them, and closes the pipes."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    child.kill()
    child.wait()
    for _ in range(50):
        leftovers = children_of(os.getpid())
        if not leftovers:
            break
        for pid in leftovers:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for pid in leftovers:
            try:
                os.waitpid(pid, 0)
            except OSError:
                pass
    # Only now: a reader blocked on a pipe a leftover held open holds the stream's lock.
    for stream in (child.stdin, child.stdout, child.stderr):
        try:
            stream.close()
        except OSError:
            pass


def children_of(parent):
    """Ids of the processes whose parent is `parent` (from /proc)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == parent:
            children.append(int(entry))
    return children


def clear_directory(root):
    """Removes everything in `root`: in Lambda /tmp belongs to this function alone and the
    handler keeps nothing there, so no file one call writes is there for the next."""
    try:
        entries = os.listdir(root)
    except OSError:
        return
    for entry in entries:
        path = os.path.join(root, entry)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass
