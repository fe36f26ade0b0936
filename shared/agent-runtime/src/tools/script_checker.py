"""Checks a custom tool's script without running it: the script the platform runs as a tool in
the tool sandbox (python.rs, ToolSandbox::check_script), so that the Python that will run a tool
is the one that judges it.

run(source) compiles the source the way the harness will load it (a module), which catches
syntax errors and what CPython's compiler refuses ('return' outside a function, 'await' outside
an async function, nonlocal at module level, ...), then looks for the entry point: a top-level
`def run` or `async def run`. Nothing in the source is executed.

Answer: {"valid": true} or {"valid": false, "message", "line", "column"} (1-based; null when
the problem has no place).
"""
import ast

ENTRY_POINT = "run"


def run(source):
    try:
        tree = compile(source, "<tool>", "exec", ast.PyCF_ONLY_AST, dont_inherit=True)
        compile(tree, "<tool>", "exec", dont_inherit=True)
    except SyntaxError as error:  # IndentationError and TabError too
        return problem("syntax error: " + str(error.msg), error.lineno, error.offset)
    except (RecursionError, MemoryError):
        return problem("the script is nested too deeply or too large to compile")
    except ValueError as error:  # NUL bytes, before Python 3.12 made them a SyntaxError
        return problem("syntax error: " + str(error))
    except Exception as error:  # whatever else the compiler raises: a finding, not a crash
        return problem("the script could not be compiled (%s: %s)" % (type(error).__name__, error))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == ENTRY_POINT:
            return {"valid": True}
    return problem("the script must define a top-level function `%s`" % ENTRY_POINT)


def problem(message, line=None, column=None):
    place = lambda number: number if isinstance(number, int) and number > 0 else None
    return {"valid": False, "message": message, "line": place(line), "column": place(column)}
