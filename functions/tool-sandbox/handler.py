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
before answering. If one ever survived, a warm Lambda environment would serve the next tenant's
call beside it, so the function answers and then exits, and Lambda starts a fresh environment.
In Lambda, everything left in /tmp is removed after each call too.
"""

import ctypes
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
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

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/PID/environ, mem and fd of this process are closed to the tool
_libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: what the tool leaves behind becomes this process's child
_log = logging.getLogger("tool-sandbox")

# The program of the tool's process: next to this file in the function; given to the launcher.
HARNESS = None if __name__ == "__main__" else open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness.py"), encoding="utf-8").read()

# Set when a call left a process this one could not kill: the environment must not serve another.
_environment_spoiled = False


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
    try:
        answer, survivors = run_tool(request, limits, OutboundPolicy.from_environment())
    finally:
        if "AWS_LAMBDA_FUNCTION_NAME" in os.environ:
            clear_directory(tempfile.gettempdir())
    if survivors:
        _log.error("tool call left %d processes that could not be killed; this environment exits after answering", len(survivors))
        exit_after_answering()
    _log.info("tool call: %s in %d ms", "ok" if "ok" in answer else "error", (time.monotonic() - started) * 1000)
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
        answer, survivors = run_tool(request, limits, OutboundPolicy.from_environment(), stop)
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
    """Runs the harness in its own directory: `(answer, survivors)`, the answer as the runner
    reads it and the processes of the call that outlived the cleanup (none, unless something
    could not be killed). Setting `stop` cancels the call."""
    try:
        directory = tempfile.mkdtemp(prefix="tool-sandbox-")
    except OSError as error:
        return {"error": f"the sandbox could not start ({error})"}, []
    proxy = None
    try:
        if limits["allow_network"]:
            proxy = EgressProxy(os.path.join(directory, ".egress"), policy)
        return run_in(directory, request, limits, proxy, stop or threading.Event())
    except OSError as error:
        return {"error": f"the sandbox could not start ({error})"}, []
    finally:
        if proxy is not None:
            proxy.close()
        shutil.rmtree(directory, ignore_errors=True)


def run_in(directory, request, limits, proxy, stop):
    settings = {
        "cpu": limits["cpu_seconds"],
        "memory": limits["memory_bytes"],
        "processes": limits["max_processes"],
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


class Streams:
    """The harness's stdin written and its stdout (bounded) and stderr read, each in a thread of
    its own: a tool that never reads stdin must not block the reads."""

    def __init__(self, child, payload, limits):
        # What has been read so far, and whether there was more than the limit.
        self.kept = {"out": bytearray(), "err": bytearray()}
        self.overflow = {"out": False, "err": False}
        self.threads = [
            threading.Thread(target=self.write, args=(child.stdin, payload), daemon=True),
            threading.Thread(target=self.read, args=("out", child.stdout, limits["max_output_bytes"]), daemon=True),
            threading.Thread(target=self.read, args=("err", child.stderr, STDERR_BYTES), daemon=True),
        ]
        for thread in self.threads:
            thread.start()

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


def is_public(ip):
    """As guard.rs's `is_public`: IPv6 forms that carry an IPv4 address count as that address."""
    if ip.version == 6:
        value = int(ip)
        embedded = ip.ipv4_mapped or ip.sixtofour
        if embedded is None and value >> 32 == 0x0064FF9B0000000000000000 >> 32:
            embedded = ipaddress.IPv4Address(value & 0xFFFFFFFF)  # NAT64 64:ff9b::/96
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


if __name__ == "__main__":
    main()
