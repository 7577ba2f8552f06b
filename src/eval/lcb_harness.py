# Runs one LiveCodeBench solution on its tests inside the sandbox (sandbox.h) and reports each test's OUTPUT;
# the evaluator compares outputs with the expected ones, which never enter the sandbox.
#
# It reproduces how lcb_runner/evaluation/testing_util.py (LiveCodeBench @b1e7cab, the commit MLPerf pins) runs a
# program, so that the same programs pass:
#   - before compiling, the same functions are disabled (reliability_guard: os.kill, os.system, os.fork,
#     subprocess.Popen, shutil.rmtree, os.remove, ... set to None; quit, help None);
#   - the same modules are star-imported in front of the program, and the recursion limit set to 50000;
#   - stdin/stdout problems: a final `if __name__ == '__main__':` block is unwrapped, every statement but the
#     imports is wrapped in a function, and each test calls it with stdin replaced by an object whose read()
#     returns the input, readline() the next line without its newline (StopIteration after the last),
#     readlines() the input split on "\n", buffer.read() its bytes and buffer.readline() its first line; open()
#     returns the input too; sys.stdout is captured, and SystemExit ends the call quietly;
#   - call-based problems: `class Solution` is instantiated when the program contains that text; each input line
#     is a JSON argument; a tuple result counts as a list;
#   - every test has a wall-clock alarm of the per-test timeout (the compile too); the first test that fails
#     ends the run, as lcb_runner stops at it.
# Protocol: argv[1] is the spec file (mode, fn_name, timeout, inputs), argv[2] the program; one JSON object per
# line on the original stdout, which is kept private (fd 1 is pointed at /dev/null for the program):
#   {"event": "compiled"} or {"event": "compile_error", "error": ...}, then per test
#   {"test": i, "status": "ok", "output": text} (stdio: the captured stdout; call: json.dumps of the result)
#   or {"test": i, "status": "timeout" | "error", "error": ...}.
import ast
import builtins
import io
import json
import os
import signal
import sys
from types import ModuleType
from unittest.mock import mock_open, patch

STAR_IMPORTED = ["string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
                 "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins", "typing"]
IMPORTED = ["string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random", "statistics",
            "itertools", "functools", "operator", "io", "sys", "json"]
PRELUDE = "".join(f"from {m} import *\n" for m in STAR_IMPORTED) + "".join(f"import {m}\n" for m in IMPORTED) + \
    "sys.setrecursionlimit(50000)\n"

results = os.fdopen(os.dup(1), "w", encoding="utf-8", errors="surrogatepass")
null_fd = os.open(os.devnull, os.O_WRONLY)
os.dup2(null_fd, 1)
sys.set_int_max_str_digits(50000)  # as compute_code_generation_metrics sets it


def emit(record):
    results.write(json.dumps(record) + "\n")
    results.flush()


class TimeoutException(Exception):
    pass


def on_alarm(signum, frame):
    raise TimeoutException


def arm(seconds):
    signal.setitimer(signal.ITIMER_REAL, seconds)


def disarm():
    signal.setitimer(signal.ITIMER_REAL, 0)


def disable_destructive_functions():
    import shutil
    import subprocess
    os.environ["OMP_NUM_THREADS"] = "1"
    builtins.quit = None
    for name in ["kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork", "forkpty",
                 "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown", "chmod",
                 "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"]:
        setattr(os, name, None)
    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    subprocess.Popen = None
    builtins.help = None
    for name in ["ipdb", "joblib", "resource", "psutil", "tkinter"]:
        sys.modules[name] = None


def unwrap_main_guard(code):
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            code = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:
        pass
    return code


def wrap_in_function(code):
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        others = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(name="wrapped_function",
                                   args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                                      defaults=[]),
                                   body=others, decorator_list=[], lineno=-1)
        return PRELUDE + "\n" + ast.unparse(imports) + "\n" + ast.unparse(function)
    except Exception:
        return code


def compile_program(code, timeout, instantiate_solution):
    arm(timeout)
    try:
        module = ModuleType("tmp_sol", "")
        exec(code, module.__dict__)
        return module.Solution() if instantiate_solution else module
    finally:
        disarm()


class StdinBuffer:
    def __init__(self, text):
        self.data = text.encode("utf-8")

    def read(self, *args):
        return self.data

    def readline(self, *args):
        return self.data.split(b"\n")[0] + b"\n"


class Stdin:
    # Not iterable, as lcb_runner's stand-in is not: `for line in sys.stdin` fails there too.
    def __init__(self, text):
        self.text = text
        self.stream = io.StringIO(text)
        self.buffer = StdinBuffer(text)

    def read(self, *args):
        return self.text

    def readline(self, *args):
        return self.stream.readline(*args)

    def readlines(self, *args):
        return self.text.split("\n")

    def __getattr__(self, name):
        return getattr(self.stream, name)


def call_with_stdin(function, text):
    lines = iter(text.split("\n"))
    stdin = Stdin(text)
    with patch("builtins.open", mock_open(read_data=text)), patch("sys.stdin", stdin), \
            patch("sys.stdin.readline", lambda *args: next(lines)), \
            patch("sys.stdin.readlines", lambda *args: text.split("\n")), \
            patch("sys.stdin.read", lambda *args: text):
        try:
            function()
        except SystemExit:
            pass


def run_stdio(function, inputs, timeout):
    for i, text in enumerate(inputs):
        if isinstance(text, list):
            text = "\n".join(text)
        captured = io.StringIO()
        saved = sys.stdout
        sys.stdout = captured
        arm(timeout)
        try:
            call_with_stdin(function, text)
            disarm()
        except TimeoutException:
            sys.stdout = saved
            emit({"test": i, "status": "timeout"})
            return
        except BaseException as e:  # noqa: B036 - the program may raise anything
            disarm()
            sys.stdout = saved
            emit({"test": i, "status": "error", "error": repr(e)[:500]})
            return
        finally:
            disarm()
            sys.stdout = saved
        emit({"test": i, "status": "ok", "output": captured.getvalue()})


def run_calls(method, inputs, timeout):
    for i, text in enumerate(inputs):
        try:
            args = [json.loads(line) for line in text.split("\n")]
        except ValueError as e:
            emit({"test": i, "status": "error", "error": f"input is not JSON: {e}"})
            return
        arm(timeout)
        try:
            prediction = method(*args)
            disarm()
            if isinstance(prediction, tuple):
                prediction = list(prediction)
            output = json.dumps(prediction)
        except TimeoutException:
            emit({"test": i, "status": "timeout"})
            return
        except BaseException as e:  # noqa: B036
            disarm()
            emit({"test": i, "status": "error", "error": repr(e)[:500]})
            return
        finally:
            disarm()
        emit({"test": i, "status": "ok", "output": output})


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    with open(sys.argv[2], encoding="utf-8") as f:
        code = f.read()
    timeout = float(spec["timeout"])
    signal.signal(signal.SIGALRM, on_alarm)
    disable_destructive_functions()
    try:
        if spec["mode"] == "call":
            code = PRELUDE + "\n\n" + code
            program = compile_program(code, timeout, "class Solution" in code)
            function = getattr(program, spec["fn_name"])
        else:
            program = compile_program(wrap_in_function(unwrap_main_guard(code)), timeout, False)
            function = program.wrapped_function
    except BaseException as e:  # noqa: B036
        emit({"event": "compile_error", "error": repr(e)[:500]})
        return
    emit({"event": "compiled"})
    if spec["mode"] == "call":
        run_calls(function, spec["inputs"], timeout)
    else:
        run_stdio(function, spec["inputs"], timeout)


main()
results.close()
os._exit(0)
