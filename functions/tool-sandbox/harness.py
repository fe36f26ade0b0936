"""The harness of one custom tool call: the program the tool's child process runs.

Both executors run exactly this file with `python3 -I -S -c <this file> <settings>`, started by
`handler.py`: in AWS the tool-sandbox function's handler, locally the same file run as a
launcher by agent-runtime (`shared/agent-runtime/src/tools/python.rs`). It applies the limits,
gives up privileges, closes the network (or opens it only through the handler's egress proxy),
loads the tool's script as a module and calls its `run` with the arguments read from stdin.

settings (argv[1]): {"cpu": seconds, "memory": bytes, "file_bytes": bytes, "processes": count,
"guard": [the handler's pid, its process group], "network": allowed, "egress": path of the
egress proxy's Unix socket or null, "share": bool}
stdout: first READY (one byte) once the limits and the seccomp filter are in place and the
process is not dumpable: only then does the handler write the request; or, if the sandbox
cannot be closed, the error answer at once (fail closed: the request is never read and the tool
never runs).
stdin: {"script", "arguments", "shared_outputs"}
stdout: then one JSON object, {"ok": value} or {"error": "Type: message"}; what the tool prints
is discarded.
"""
import ctypes, io, json, os, resource, signal, sys

libc = ctypes.CDLL(None, use_errno=True)
# Before anything else: no other process of this user (a tool of an earlier call that escaped,
# in a warm environment) may open this one's /proc/PID/fd/0 (the request: script, arguments,
# fixed arguments such as API keys), fd/1 (the answer) or its memory.
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
limits = json.loads(sys.argv[1])
READY = b"\x06"


class NotClosed(Exception):
    """The sandbox could not be closed: the tool must not run."""


def fail_closed(reason):
    """Answers that the sandbox could not be closed, and exits before reading the request."""
    os.write(1, json.dumps({"error": f"the sandbox could not be closed ({reason})"}).encode())
    os._exit(0)


def own_tasks():
    """Tasks (threads) of this process's real user now: what RLIMIT_NPROC counts."""
    uid, count = os.getuid(), 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as status:
                fields = dict(line.split(b":", 1) for line in status.read().splitlines() if b":" in line)
            if int(fields[b"Uid"].split()[0]) == uid:
                count += int(fields[b"Threads"])
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return count


resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"]))
resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
# One file at most this large: the function's EphemeralStorage bounds the sum. A write past it
# fails (EFBIG) instead of killing the tool with SIGXFSZ.
resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
# RLIMIT_NPROC counts every task of the user, so the tool may start `processes` more than there
# are now. The kernel does not apply it to root (locally, CI): there the handler's cleanup alone
# bounds what a tool leaves; in Lambda the sandbox is its own user and it applies.
tasks = own_tasks() + limits["processes"]
resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))
# A network namespace of its own, where the process may make one (root, user namespaces); fails
# quietly elsewhere (Lambda). With the network allowed too: the egress proxy is reached through
# a Unix socket, which crosses namespaces.
libc.unshare(0x40000000)  # CLONE_NEWNET


def give_up_privileges():
    """A sandbox started with capabilities (root in a container) drops them, for itself and
    anything it executes: an empty bounding set, no_new_privs, empty capability sets. Then it
    cannot read another process's memory or environment (/proc/PID/environ of a non-dumpable
    parent), even as the same user."""
    for capability in range(64):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            break
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise NotClosed(f"no_new_privs was refused: errno {ctypes.get_errno()}")

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())  # _LINUX_CAPABILITY_VERSION_3


# Per architecture: its audit value and the numbers of the system calls the filter judges.
ARCHITECTURES = {
    "x86_64": {"arch": 0xC000003E, "socket": 41, "kill": 62, "tkill": 200, "tgkill": 234,
               "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297},
    "aarch64": {"arch": 0xC00000B7, "socket": 198, "kill": 129, "tkill": 130, "tgkill": 131,
                "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240},
}
IO_URING_SETUP, PIDFD_SEND_SIGNAL = 425, 424  # the same on both


def close_the_kernel(guard):
    """A seccomp filter, checked, else NotClosed (an unknown architecture included):
    - socket() of any family but AF_UNIX, and io_uring_setup, fail with EACCES; system calls of
      another architecture (32-bit compat, x32) fail too. Unlike the Python-level refusal below,
      code that reaches the C library (`_socket`, ctypes) cannot get around it;
    - the handler (`guard`: its pid and process group) cannot be signalled: kill() of its pid,
      of its group or of every process (-1), tgkill() of its threads, and tkill(),
      pidfd_send_signal() and the queued-signal calls altogether fail with EPERM. (kill() of one
      of its other threads' ids still reaches it: the handler then notices it was stopped.)
    Needs no privileges (no_new_privs is set)."""
    calls = ARCHITECTURES.get(os.uname().machine)
    if calls is None:
        raise NotClosed(f"no seccomp filter for the {os.uname().machine} architecture")
    handler, group, everyone = guard[0] & 0xFFFFFFFF, (-guard[1]) & 0xFFFFFFFF, 0xFFFFFFFF
    allow, refuse, forbid = 0x7FFF0000, 0x00050000 | 13, 0x00050000 | 1  # ALLOW, ERRNO|EACCES, ERRNO|EPERM
    load, equal, at_least, give = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JEQ|K, JGE|K, RET|K
    # Jumps are relative: (code, jump if true, jump if false, k).
    program = [
        (load, 0, 0, 4),  # arch
        (equal, 1, 0, calls["arch"]),
        (give, 0, 0, refuse),
        (load, 0, 0, 0),  # system call number
        (at_least, 0, 1, 0x40000000),  # x32
        (give, 0, 0, refuse),
        (equal, 0, 1, IO_URING_SETUP),
        (give, 0, 0, refuse),
        (equal, 0, 1, PIDFD_SEND_SIGNAL),
        (give, 0, 0, forbid),
        (equal, 0, 1, calls["tkill"]),
        (give, 0, 0, forbid),
        (equal, 0, 1, calls["rt_sigqueueinfo"]),
        (give, 0, 0, forbid),
        (equal, 0, 1, calls["rt_tgsigqueueinfo"]),
        (give, 0, 0, forbid),
        (equal, 0, 4, calls["tgkill"]),
        (load, 0, 0, 16),  # the thread group (first argument, low half)
        (equal, 0, 1, handler),
        (give, 0, 0, forbid),
        (give, 0, 0, allow),
        (equal, 0, 6, calls["kill"]),
        (load, 0, 0, 16),  # the pid (first argument, low half)
        (equal, 3, 0, handler),
        (equal, 2, 0, group),
        (equal, 1, 0, everyone),
        (give, 0, 0, allow),
        (give, 0, 0, forbid),
        (equal, 0, 3, calls["socket"]),
        (load, 0, 0, 16),  # the address family (first argument)
        (equal, 1, 0, 1),  # AF_UNIX
        (give, 0, 0, refuse),
        (give, 0, 0, allow),
    ]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = (Instruction * len(program))(*[Instruction(*step) for step in program])
    if libc.prctl(22, 2, ctypes.byref(Program(len(program), instructions)), 0, 0) != 0:  # PR_SET_SECCOMP, FILTER
        raise NotClosed(f"the kernel refused the seccomp filter: errno {ctypes.get_errno()}")
    # Proof, not trust: the kernel must now refuse an Internet socket.
    import _socket

    try:
        probe = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    except PermissionError:
        return
    probe.close()
    raise NotClosed("an Internet socket could still be opened")


def refuse_the_network():
    """Python's socket functions raise, with a message the tool can act on."""
    import socket

    def _refused(*args, **kwargs):
        raise PermissionError("network access is not allowed for this tool")

    socket.socket = _refused
    socket.create_connection = _refused
    socket.getaddrinfo = _refused


def route_through_egress(proxy):
    """TCP connections made with Python's socket module go through the handler's egress proxy
    (an HTTP CONNECT proxy on the Unix socket `proxy`), which resolves the name and refuses what
    the platform's outbound guard refuses (loopback, private and link-local addresses, instance
    metadata, the Lambda Runtime API). The kernel refuses any other socket (seccomp), so code
    that goes around this module (`_socket`, ctypes) reaches nothing. Names are resolved by the
    proxy: `getaddrinfo` answers the name itself."""
    import socket

    Socket = socket.socket

    class EgressSocket(Socket):
        """A TCP socket whose `connect` is a CONNECT through the proxy."""

        def __init__(self, family=socket.AF_INET, type=socket.SOCK_STREAM, proto=0, fileno=None):
            self._egress = fileno is None and family in (socket.AF_INET, socket.AF_INET6)
            if not self._egress:
                super().__init__(family, type, proto, fileno)
                return
            if type & 0xF != socket.SOCK_STREAM:
                raise PermissionError("only TCP connections are allowed for this tool")
            super().__init__(socket.AF_UNIX, socket.SOCK_STREAM)

        def connect(self, address):
            if not self._egress:
                return super().connect(address)
            host, port = str(address[0]), int(address[1])
            if not host.isascii():
                host = host.encode("idna").decode("ascii")
            target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            super().connect(proxy)
            self.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode("ascii"))
            head = b""
            while not head.endswith(b"\r\n\r\n") and len(head) < 8192:
                byte = self.recv(1)
                if not byte:
                    break
                head += byte
            status, _, reason = head.decode("latin-1").partition("\r\n")[0].partition(" ")[2].partition(" ")
            if status != "200":
                self.close()
                raise PermissionError(f"the connection to {target} was refused: {reason or 'no answer from the egress proxy'}")

        def setsockopt(self, level, option, *value):
            # TCP options (http.client sets TCP_NODELAY) are the proxy's to set, not a Unix socket's.
            if self._egress and level == socket.IPPROTO_TCP:
                return None
            return super().setsockopt(level, option, *value)

        def connect_ex(self, address):
            try:
                self.connect(address)
                return 0
            except OSError as error:
                return error.errno or 111  # ECONNREFUSED

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
        if isinstance(host, bytes):
            host = host.decode("idna")
        if host is None:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        kind = socket.AF_INET6 if ":" in host else socket.AF_INET
        address = (host, int(port or 0), 0, 0) if kind == socket.AF_INET6 else (host, int(port or 0))
        return [(kind, socket.SOCK_STREAM, 6, "", address)]

    socket.socket = EgressSocket
    socket.getaddrinfo = getaddrinfo


try:
    give_up_privileges()
    close_the_kernel(limits["guard"])
except NotClosed as error:
    fail_closed(error)
if limits["network"] and limits.get("egress"):
    route_through_egress(limits["egress"])
else:
    refuse_the_network()
os.write(1, READY)
request = json.loads(sys.stdin.read())
# The tool and whatever it starts get neither the request's pipe nor the answer's: the answer
# goes to a descriptor of the harness's own, closed on exec.
quiet = os.open(os.devnull, os.O_RDWR)
os.dup2(quiet, 0)
out = os.fdopen(os.dup(1), "w")
os.dup2(quiet, 1)
os.close(quiet)
sys.stdout = io.StringIO()
source = request["script"]
try:
    namespace = {"__name__": "tool"}
    exec(compile(source, "tool.py", "exec"), namespace)
    arguments = dict(request.get("arguments") or {})
    if limits["share"]:
        arguments["shared_outputs"] = request.get("shared_outputs") or []
    result = namespace["run"](**arguments)
    try:
        text = json.dumps({"ok": result})
    except (TypeError, ValueError):
        text = json.dumps({"ok": repr(result)})
except BaseException as error:
    text = json.dumps({"error": f"{type(error).__name__}: {error}"})
out.write(text)
out.flush()
