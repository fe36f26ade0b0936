"""The tool sandbox: one custom tool call, with its limits, and nothing of it left afterwards.

Two entry points run the same call:
- `handler(event, context)`: the tool-sandbox function (Python runtime, no IAM permissions),
  invoked by the agent runner (shared/agent-runtime/src/tools/python.rs);
- `python3 -I -S -c <this file> <harness.py's source>`: the local executor's launcher, one
  process per call, started by the same Rust code: the event as one JSON line on stdin, the
  answer as JSON on stdout; stdin closing before the answer cancels the call.

The event is {"script", "arguments", "shared_outputs", "limits"}, the answer {"ok": value} or
{"error": message}. The tool runs in a child process running harness.py (it applies the CPU,
memory and process limits, drops privileges, makes itself non-dumpable and closes the network,
or opens it only through this process's egress proxy), with
- an empty environment: none of this process's variables (the function's session credentials);
- an empty directory of its own as working directory, removed afterwards;
- the call's wall-clock limit;
- stdout read up to the output limit.

This process is not dumpable (the tool, the same Unix user, cannot read its environment or
memory through /proc), and it is the subreaper of whatever the tool starts: when the call ends,
it kills every process descended from it, again and again until a full /proc scan finds none,
before answering. In Lambda, /tmp is emptied at the start and at the end of every call (each
directory made accessible to its owner before it is entered: a tool can leave mode-000 ones).

Each account's calls have environments of their own (the function's tenant isolation mode), so
what could survive a call only ever meets the same account's next call; even so an environment
where anything survived is *spoiled*: it answers, then exits, and Lambda starts a fresh one for
the next call. Spoiled: a process that outlived the cleanup, anything left in /tmp, a call
directory that could not be made, a call that took longer than its limits allow (the tool
stopped this process), or, at a new process's start, a process of this user that is not this
process's (the tool killed the last one: whatever it left is killed before anything runs).
"""

import ctypes
import ipaddress
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time

# The runner's defaults (python.rs SandboxLimits), for a request that leaves one out.
DEFAULT_LIMITS = {
    "wall_time_ms": 30_000,
    "cpu_seconds": 20,
    "memory_bytes": 512 * 1024 * 1024,
    "max_output_bytes": 1024 * 1024,
    "max_processes": 32,
    "allow_network": False,
}
# Kept of the invocation's remaining time to kill the tool, clean up and answer.
RESERVE_MS = 3_000
STDERR_BYTES = 4096
# How long the cleanup may go on killing what a tool left before it gives up on this environment.
CLEANUP_SECONDS = 5.0
# After answering with a survivor in the environment: time for the runtime to send the answer.
EXIT_AFTER_ANSWER_SECONDS = 1.0
# The largest file a tool may write (RLIMIT_FSIZE, set in the harness); the function's
# EphemeralStorage bounds the sum.
MAX_FILE_BYTES = 256 * 1024 * 1024
# How long emptying /tmp may take before the environment is given up on.
CLEAR_SECONDS = 10.0
# Time a call may take beyond its wall-clock limit (start, cleanup, answer) before the handler
# concludes it was stopped meanwhile.
STOPPED_MARGIN_SECONDS = CLEANUP_SECONDS + 5.0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/PID/environ, mem and fd of this process are closed to the tool
_libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what the tool leaves behind becomes this process's child
_log = logging.getLogger("tool-sandbox")
IN_LAMBDA = "AWS_LAMBDA_FUNCTION_NAME" in os.environ

# The program of the tool's process: next to this file in the function; given to the launcher.
HARNESS = None if __name__ == "__main__" else open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py"), encoding="utf-8").read()

# Set when a call left something behind this one could not remove: the environment must not
# serve another.
_environment_spoiled = False


def strangers():
    """Processes of this user that are neither this process, its ancestors nor its descendants:
    at a new process's start, what a call of the process before left (it killed its handler)."""
    own = {os.getpid(), *descendants(os.getpid())}
    uid, found = os.getuid(), []
    ancestors, pid = set(), os.getpid()
    while pid > 1:
        ancestors.add(pid)
        pid = parent_of(pid)
        if pid is None:
            break
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in own or int(entry) in ancestors or int(entry) == 1:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as status:
                state = status.read().rsplit(b")", 1)[1].split()[0]
            # A zombie runs nothing and is its parent's to reap.
            if os.stat(f"/proc/{entry}").st_uid == uid and state != b"Z":
                found.append(int(entry))
        except (OSError, IndexError):
            continue
    return found


def parent_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return int(status.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def clear_strangers():
    """Kills what a call of this environment's previous process left (see `strangers`); raises
    when something stays, so Lambda discards the environment instead of serving from it."""
    give_up = time.monotonic() + CLEANUP_SECONDS
    while True:
        left = strangers()
        if not left:
            return
        if time.monotonic() > give_up:
            raise RuntimeError(f"{len(left)} processes of an earlier call could not be killed")
        _log.warning("killing %d processes an earlier call left", len(left))
        for pid in left:
            kill(pid)
        time.sleep(0.01)


class InvalidRequest(Exception):
    """The event is not the runner's request."""


def handler(event, context):
    """One tool call: `{"ok": value}` or `{"error": message}`; raises only on a bug of its own."""
    if _environment_spoiled:
        # The exit after the last answer has not happened yet: never run a call beside a survivor.
        os._exit(1)
    started = time.monotonic()
    try:
        request, limits = read_event(event)
    except InvalidRequest as error:
        return {"error": f"the tool sandbox got an invalid request ({error})"}
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is not None:
        limits["wall_time_ms"] = max(1, min(limits["wall_time_ms"], remaining() - RESERVE_MS))
    if IN_LAMBDA and not clear_directory(tempfile.gettempdir()):
        return spoiled({"error": "the sandbox could not start (its temporary directory could not be emptied)"}, "/tmp could not be emptied before the call")
    try:
        answer, survivors, started_ok = run_tool(request, limits, OutboundPolicy.from_environment())
    finally:
        cleared = clear_directory(tempfile.gettempdir()) if IN_LAMBDA else True
    took = time.monotonic() - started
    if survivors:
        return spoiled(answer, f"the call left {len(survivors)} processes that could not be killed")
    if not cleared:
        return spoiled(answer, "the call left files in /tmp that could not be removed")
    if not started_ok:
        return spoiled(answer, "the call's directory could not be made")
    if took > limits["wall_time_ms"] / 1000 + STOPPED_MARGIN_SECONDS:
        return spoiled(answer, f"the call took {took:.0f} s, past its limits: the handler was stopped")
    _log.info("tool call: %s in %d ms", "ok" if "ok" in answer else "error", took * 1000)
    return answer


def spoiled(answer, reason):
    """Answers `answer`, then ends this environment (see the module's documentation)."""
    _log.error("%s; this environment exits after answering", reason)
    exit_after_answering()
    return answer


def exit_after_answering():
    """Ends this process once the runtime has had time to send the answer (Lambda then starts a
    new environment for the next call); a call that comes first is refused by `handler`."""
    global _environment_spoiled
    _environment_spoiled = True

    def leave():
        time.sleep(EXIT_AFTER_ANSWER_SECONDS)
        os._exit(1)

    threading.Thread(target=leave, daemon=True).start()


def main():
    """The local executor's launcher: one call, then exit (so nothing of this process is kept
    either). A closed stdin before the answer (the runner dropped the call, or died) cancels it."""
    global HARNESS
    HARNESS = sys.argv[1]
    try:
        event = json.loads(sys.stdin.buffer.readline())
        request, limits = read_event(event)
    except (ValueError, InvalidRequest) as error:
        answer = {"error": f"the tool sandbox got an invalid request ({error})"}
    else:
        stop = threading.Event()

        def watch_stdin():
            try:
                while os.read(0, 4096):
                    pass
            except OSError:
                pass
            stop.set()

        threading.Thread(target=watch_stdin, daemon=True).start()
        answer, survivors, _ = run_tool(request, limits, OutboundPolicy.from_environment(), stop)
        if survivors:
            print(f"tool-sandbox: {len(survivors)} processes of the call could not be killed", file=sys.stderr)
    sys.stdout.write(json.dumps(answer))
    sys.stdout.flush()
    # Not the interpreter's shutdown: it would wait on the stdin watcher's read.
    os._exit(0)


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


def run_tool(request, limits, policy, stop=None):
    """Runs the harness in its own directory: `(answer, survivors, started)`, the answer as the
    runner reads it, the processes of the call that outlived the cleanup (none, unless something
    could not be killed) and whether the call's directory could be made. Setting `stop` cancels
    the call."""
    try:
        directory = tempfile.mkdtemp(prefix="tool-sandbox-")
    except OSError as error:
        return {"error": f"the sandbox could not start ({error})"}, [], False
    proxy = None
    try:
        if limits["allow_network"]:
            proxy = EgressProxy(os.path.join(directory, ".egress"), policy)
        return (*run_in(directory, request, limits, proxy, stop or threading.Event()), True)
    except OSError as error:
        return {"error": f"the sandbox could not start ({error})"}, [], True
    finally:
        if proxy is not None:
            proxy.close()
        remove_tree(directory)


def run_in(directory, request, limits, proxy, stop):
    settings = {
        "cpu": limits["cpu_seconds"],
        "memory": limits["memory_bytes"],
        "file_bytes": MAX_FILE_BYTES,
        "processes": limits["max_processes"],
        # This process and its group: the tool may not signal them (seccomp, in the harness).
        "guard": [os.getpid(), os.getpgid(0)],
        "network": limits["allow_network"],
        "egress": proxy.path if proxy is not None else None,
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
        return {"error": f"the sandbox could not start python3 ({error})"}, []
    outcome = "error"
    survivors = []
    try:
        outcome, streams = exchange(child, json.dumps(request).encode(), limits, stop)
    finally:
        survivors = end_everything(child)
    if outcome == "cancelled":
        return {"error": "the tool call was cancelled"}, survivors
    if outcome == "late":
        return {"error": f"the tool did not finish within {limits['wall_time_ms'] // 1000} seconds"}, survivors
    (out, overflow), (err, _) = streams.result()
    if overflow:
        return {"error": f"the tool wrote more than {limits['max_output_bytes']} bytes"}, survivors
    return read_answer(out, err, child.returncode), survivors


def child_environment():
    """PATH and LANG only, as locally. A shared build of the interpreter (Lambda's, in /var/lang)
    also needs its own library directory to start."""
    environment = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    library = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and library:
        environment["LD_LIBRARY_PATH"] = library
    return environment


# The harness's first byte: it is closed (limits, seccomp, not dumpable) and may get the request.
READY = b"\x06"


class Streams:
    """The harness's stdin written and its stdout (bounded) and stderr read, in threads of their
    own: a tool that never reads stdin must not block the reads. The request is written only
    once the harness says READY: before that, its /proc entries are open to other processes of
    this user. Anything else first is the harness's own answer (it could not close itself)."""

    def __init__(self, child, payload, limits):
        # What has been read so far, and whether there was more than the limit.
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.overflow = {"out": False, "err": False}
        self.threads = [
            threading.Thread(target=self.exchange, args=(child, payload, limits["max_output_bytes"]), daemon=True),
            threading.Thread(target=self.read, args=("err", child.stderr, STDERR_BYTES), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def exchange(self, child, payload, limit):
        try:
            first = child.stdout.read(1)
        except (OSError, ValueError):
            first = b""
        if first == READY:
            self.write(child.stdin, payload)
        else:
            self.kept["out"] += first
            self.write(child.stdin, b"")
        self.read("out", child.stdout, limit)

    @staticmethod
    def write(stream, payload):
        try:
            stream.write(payload)
        except OSError:
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def read(self, name, stream, limit):
        self.overflow[name] = read_bounded(stream, limit, self.kept[name])

    def result(self):
        """Both outputs, `(bytes, overflowed)`: read to their ends, as this is called once every
        process of the call is gone and no one holds the pipes any more; or, if one survived
        holding them, what had arrived within CLEANUP_SECONDS."""
        give_up = time.monotonic() + CLEANUP_SECONDS
        for thread in self.threads:
            thread.join(max(0.0, give_up - time.monotonic()))
        return tuple((bytes(self.kept[name]), self.overflow[name]) for name in ("out", "err"))


def exchange(child, payload, limits, stop):
    """Gives the harness its request and waits, within the wall-clock limit, for it to exit or
    for `stop` (set by the harness's exit, or by a cancel): `("done" | "late" | "cancelled",
    streams)`. Its outputs are read to their ends only after the cleanup: a process the tool
    started may hold them open."""
    deadline = time.monotonic() + limits["wall_time_ms"] / 1000
    streams = Streams(child, payload, limits)

    def wait():
        child.wait()
        stop.set()

    threading.Thread(target=wait, daemon=True).start()
    stop.wait(max(0.0, deadline - time.monotonic()))
    if child.poll() is not None:
        return "done", streams
    return ("cancelled" if stop.is_set() else "late"), streams


def read_bounded(stream, limit, kept):
    """Reads to the end, keeping at most `limit` bytes in `kept`: whether there was more.
    Draining the rest keeps a talkative child from blocking on a full pipe (the wall-clock limit
    still ends it)."""
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
    return overflow


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
    """An exit status as Rust's ExitStatus shows it."""
    if status is None:
        return "still running"
    if status < 0:
        try:
            return f"signal: {-status} ({signal.Signals(-status).name})"
        except ValueError:
            return f"signal: {-status}"
    return f"exit status: {status}"


def end_everything(child):
    """Kills the harness and every process descended from this one (the tool's, however they
    were started: new sessions, double forks, processes that ignore SIGTERM all end here, as
    the subreaper adopts every orphan), reaps them, and repeats until a full /proc scan finds
    none, for at most CLEANUP_SECONDS. Returns the ids of those still there (none, normally)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        child.kill()
    except OSError:
        pass
    child.wait()
    give_up = time.monotonic() + CLEANUP_SECONDS
    while True:
        reap()
        left = descendants(os.getpid())
        if not left or time.monotonic() > give_up:
            return left
        for pid in left:
            kill(pid)
        time.sleep(0.001)  # a killed process needs the CPU once to die


def kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def reap():
    """Collects every child that has ended (the subreaper's adopted orphans included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def descendants(root):
    """Ids of the processes descended from `root`, from one scan of /proc; those that ended and
    wait to be reaped too (they are reaped once their parent is killed and they are ours)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1:
            parents.setdefault(int(fields[1]), []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found.extend(children)
        frontier.extend(children)
    return found


def clear_directory(root):
    """Removes everything in `root` (in Lambda, /tmp: it belongs to this function alone and the
    handler keeps nothing there, so no file one call writes is there for the next). True when
    `root` is empty afterwards."""
    try:
        # A tool may have taken its owner's rights away from it too (where it owns it).
        os.chmod(root, stat.S_IMODE(os.stat(root).st_mode) | 0o700)
    except OSError:
        pass
    try:
        names = os.listdir(root)
    except OSError:
        return False
    for name in names:
        remove_tree(os.path.join(root, name))
    try:
        return not os.listdir(root)
    except OSError:
        return False


def remove_tree(path):
    """Removes `path` and everything under it, as its owner: each directory is given back its
    owner's rwx before it is entered (a tool may leave mode-000 or write-only ones, which
    `shutil.rmtree` as a non-root user cannot enter), through directory descriptors (no path
    length or recursion limit; symbolic links are removed, never followed). What cannot be
    removed is left (the caller sees it), and so is the rest after CLEAR_SECONDS."""
    parent, name = os.path.split(path)
    try:
        top = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    give_up = time.monotonic() + CLEAR_SECONDS
    failed = set()  # (device, inode) of entries that could not be removed: never tried twice
    stack = []  # directories being emptied: (descriptor, parent's descriptor, name in parent)
    todo = (top, name)  # the next entry to remove: (directory descriptor, name)
    try:
        while time.monotonic() < give_up:
            if todo is None:
                if not stack:
                    break
                fd, parent_fd, directory = stack[-1]
                entry = next_entry(fd, failed)
                if entry is not None:
                    todo = (fd, entry)
                    continue
                stack.pop()
                os.close(fd)
                remove_empty(parent_fd, directory, failed)
                continue
            (where, entry), todo = todo, None
            try:
                info = os.stat(entry, dir_fd=where, follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(info.st_mode):
                try:
                    os.unlink(entry, dir_fd=where)
                except OSError:
                    failed.add((info.st_dev, info.st_ino))
                continue
            try:
                os.chmod(entry, 0o700, dir_fd=where)
                child = os.open(entry, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=where)
            except OSError:
                failed.add((info.st_dev, info.st_ino))
                continue
            stack.append((child, where, entry))
    finally:
        for fd, _, _ in stack:
            os.close(fd)
        os.close(top)


def next_entry(fd, failed):
    """An entry of directory `fd` still to remove (not one that failed before), or None."""
    try:
        names = os.listdir(fd)
    except OSError:
        return None
    for name in names:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if (info.st_dev, info.st_ino) not in failed:
            return name
    return None


def remove_empty(fd, name, failed):
    """Removes the directory `name` in `fd`, emptied just before (remembered as failed if not)."""
    try:
        os.rmdir(name, dir_fd=fd)
    except OSError:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            failed.add((info.st_dev, info.st_ino))
        except OSError:
            pass


class OutboundPolicy:
    """The platform's outbound guard (shared/outbound/src/guard.rs), for a tool's connections:
    public addresses only, unless `OUTBOUND_ALLOWED_HOSTS` allows a host name, an address or a
    network; the Lambda Runtime API (`AWS_LAMBDA_RUNTIME_API`) never."""

    def __init__(self, allowed, runtime_api):
        self.hosts, self.networks = set(), []
        for entry in (part.strip().lower() for part in (allowed or "").split(",")):
            if not entry:
                continue
            if "/" in entry:
                try:
                    self.networks.append(ipaddress.ip_network(entry, strict=False))
                except ValueError:
                    _log.warning("OUTBOUND_ALLOWED_HOSTS: %s is not a network; ignored", entry)
            else:
                self.hosts.add(entry.strip("[]"))
        self.runtime_api = (runtime_api or "").strip().lower().rpartition(":")[::2]

    @classmethod
    def from_environment(cls):
        return cls(os.environ.get("OUTBOUND_ALLOWED_HOSTS"), os.environ.get("AWS_LAMBDA_RUNTIME_API"))

    def refusal(self, host, ip, port):
        """Why `host` at `ip`:`port` may not be reached, or None."""
        ip = ipaddress.ip_address(ip)
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        api_host, api_port = self.runtime_api
        if api_port == str(port) and (api_host == host.lower() or (is_loopback(api_host) and ip.is_loopback)):
            return f"{ip}:{port} is the function runtime's own API"
        if host.lower() in self.hosts or str(ip) in self.hosts or any(ip in network for network in self.networks):
            return None
        if is_public(ip):
            return None
        return f"{ip} is a private, loopback or link-local address, which this platform does not call"


def is_loopback(name):
    name = name.strip("[]")
    try:
        return name == "localhost" or ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# 64:ff9b::/96 (RFC 6052): NAT64, the low 32 bits an IPv4 address (the address shifted right by 32).
NAT64 = 0x0064FF9B_00000000_00000000
# Never public, whatever they carry: local NAT64 prefixes (RFC 8215, the IPv4 address anywhere in
# them) and IPv4-translated addresses (::ffff:0:0:0/96, SIIT).
NEVER_PUBLIC = (ipaddress.ip_network("64:ff9b:1::/48"), ipaddress.ip_network("::ffff:0:0:0/96"))


def is_public(ip):
    """As guard.rs's `is_public`: IPv6 forms that carry an IPv4 address count as that address;
    local NAT64 and IPv4-translated addresses are never public."""
    if ip.version == 6:
        value = int(ip)
        if any(ip in network for network in NEVER_PUBLIC):
            return False
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and value >> 32 == NAT64:
            embedded = ipaddress.IPv4Address(value & 0xFFFFFFFF)
        if embedded is None and value >> 32 == 0 and value > 1:
            embedded = ipaddress.IPv4Address(value)  # IPv4-compatible
        if embedded is not None:
            return is_public(embedded)
        return ip.is_global and not ip.is_multicast and not ip.is_site_local
    return ip.is_global and not ip.is_multicast


class EgressProxy:
    """The only way out for a tool that may use the network: an HTTP CONNECT proxy on a Unix
    socket in the call's directory (the harness routes Python's sockets to it and the kernel
    refuses every other socket). It resolves the name itself, refuses what `OutboundPolicy`
    refuses, connects to the address it checked (no rebinding) and relays bytes both ways. It
    ends with the call, and every connection with it."""

    MAX_CONNECTIONS = 32
    CONNECT_SECONDS = 10.0
    HEAD_BYTES = 8192

    def __init__(self, path, policy):
        self.path, self.policy = path, policy
        self.lock = threading.Lock()
        self.sockets = set()
        self.opened = 0
        self.closed = False
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(16)
        threading.Thread(target=self.accept, daemon=True).start()

    def close(self):
        with self.lock:
            self.closed = True
            open_sockets = list(self.sockets) + [self.listener]
        for sock in open_sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def track(self, sock):
        """Keeps `sock` to close with the proxy; False when the proxy is closed already."""
        with self.lock:
            if self.closed:
                sock.close()
                return False
            self.sockets.add(sock)
            return True

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.opened += 1
                too_many = self.opened > self.MAX_CONNECTIONS
            if not self.track(client):
                return
            if too_many:
                self.answer(client, 429, f"this tool call may open at most {self.MAX_CONNECTIONS} connections")
                client.close()
                continue
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    @staticmethod
    def answer(client, status, reason):
        try:
            client.sendall(f"HTTP/1.1 {status} {reason}\r\n\r\n".encode("utf-8", "replace"))
        except OSError:
            pass

    def serve(self, client):
        try:
            target = self.read_target(client)
            if target is None:
                self.answer(client, 400, "the egress proxy takes CONNECT host:port only")
                return
            upstream, refusal = self.connect(*target)
            if upstream is None:
                self.answer(client, 403, refusal)
                return
            if not self.track(upstream):
                return
            self.answer(client, 200, "Connection established")
            threading.Thread(target=relay, args=(upstream, client), daemon=True).start()
            relay(client, upstream)
        except OSError:
            pass
        finally:
            client.close()

    def read_target(self, client):
        """`(host, port)` of the CONNECT request, or None."""
        client.settimeout(self.CONNECT_SECONDS)
        head = b""
        while b"\r\n\r\n" not in head:
            if len(head) > self.HEAD_BYTES:
                return None
            chunk = client.recv(1024)
            if not chunk:
                return None
            head += chunk
        client.settimeout(None)
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        if len(parts) != 3 or parts[0] != "CONNECT":
            return None
        host, _, port = parts[1].rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            return None
        return host, int(port)

    def connect(self, host, port):
        """A connection to the first address of `host` the policy allows: `(socket, None)`, or
        `(None, why not)`."""
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            return None, f"{host} could not be resolved"
        refusal = f"{host} has no address"
        for family, kind, proto, _, address in addresses:
            refusal = self.policy.refusal(host, address[0], port)
            if refusal is not None:
                continue
            upstream = socket.socket(family, kind, proto)
            upstream.settimeout(self.CONNECT_SECONDS)
            try:
                upstream.connect(address)
            except OSError as error:
                upstream.close()
                refusal = f"{host}:{port} did not accept the connection ({error.strerror or error})"
                continue
            upstream.settimeout(None)
            return upstream, None
        return None, refusal


def relay(source, sink):
    """Copies `source` to `sink` until `source` ends, then ends `sink`'s sending side."""
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    except OSError:
        pass
    try:
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


if IN_LAMBDA and __name__ != "__main__":
    # A new runtime process in an environment that may have served calls (its last process was
    # killed): nothing a call left may run beside the next.
    clear_strangers()

if __name__ == "__main__":
    main()
