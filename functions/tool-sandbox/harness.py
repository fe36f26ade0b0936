"""The harness of one custom tool call: the program the tool's child process runs.

Both executors run exactly this file with `python3 -I -S -c <this file> <settings>`: locally
agent-runtime embeds it (`shared/agent-runtime/src/tools/python.rs`), in AWS the tool-sandbox
function reads it (`handler.py`). It applies the limits, gives up privileges, closes the network,
loads the tool's script as a module and calls its `run` with the arguments read from stdin.

settings (argv[1]): {"cpu": seconds, "memory": bytes, "network": allowed, "share": bool}
stdin: {"script", "arguments", "shared_outputs"}
stdout: one JSON object, {"ok": value} or {"error": "Type: message"}; what the tool prints is
discarded.
"""
import ctypes, io, json, os, resource, sys

limits = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"]))
resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
libc = ctypes.CDLL(None, use_errno=True)
if not limits["network"]:
    # A network namespace of its own, where the process may make one (root, user namespaces).
    libc.unshare(0x40000000)  # CLONE_NEWNET; fails quietly elsewhere (Lambda)


def give_up_privileges():
    """A sandbox started with capabilities (root in a container) drops them, for itself and
    anything it executes: an empty bounding set, no_new_privs, empty capability sets. Then it
    cannot read another process's memory or environment (/proc/PID/environ of a non-dumpable
    parent), even as the same user."""
    for capability in range(64):
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            break
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)())  # _LINUX_CAPABILITY_VERSION_3


def refuse_sockets_in_the_kernel():
    """A seccomp filter: socket() of any family but AF_UNIX, and io_uring_setup, fail with
    EACCES; system calls of another architecture (32-bit compat, x32) fail too. Unlike the
    Python-level refusal below, code that reaches the C library (`_socket`, ctypes) cannot get
    around it. Needs no privileges (no_new_privs is set); where the kernel refuses it, the
    Python-level refusal stays."""
    arches = {"x86_64": (0xC000003E, 41), "aarch64": (0xC00000B7, 198)}
    machine = os.uname().machine
    if machine not in arches:
        return
    arch, socket_call = arches[machine]
    allow, deny = 0x7FFF0000, 0x00050000 | 13  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EACCES
    load, equal, at_least, give = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, JEQ|K, JGE|K, RET|K
    program = [
        (load, 0, 0, 4),  # arch
        (equal, 1, 0, arch),
        (give, 0, 0, deny),
        (load, 0, 0, 0),  # system call number
        (at_least, 0, 1, 0x40000000),  # x32
        (give, 0, 0, deny),
        (equal, 0, 1, 425),  # io_uring_setup
        (give, 0, 0, deny),
        (equal, 0, 3, socket_call),
        (load, 0, 0, 16),  # the address family (first argument)
        (equal, 1, 0, 1),  # AF_UNIX
        (give, 0, 0, deny),
        (give, 0, 0, allow),
    ]

    class Instruction(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Instruction))]

    instructions = (Instruction * len(program))(*[Instruction(*step) for step in program])
    libc.prctl(22, 2, ctypes.byref(Program(len(program), instructions)), 0, 0)  # PR_SET_SECCOMP, FILTER


give_up_privileges()
if not limits["network"]:
    refuse_sockets_in_the_kernel()
    import socket

    def _refused(*args, **kwargs):
        raise PermissionError("network access is not allowed for this tool")

    socket.socket = _refused
    socket.create_connection = _refused
    socket.getaddrinfo = _refused
request = json.loads(sys.stdin.read())
source = request["script"]
out = sys.stdout
sys.stdout = io.StringIO()
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
