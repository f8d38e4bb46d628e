"""Compiling Triton and Gluon kernels for a GPU target on any machine, in a clean process of their own.

The compile tests cannot compile in the test process. Without CUDA, tests/conftest.py turns on
TRITON_INTERPRET=1 before triton is imported, and an interpreted kernel that calls a jitted library
function (tl.sum, tl.max, tl.cdiv, ...) leaves triton.language.core's builtins patched with the
interpreter's semantics: triton 3.9 patches them again for every such device call and never restores them.
Every later `triton.compile` in that process then fails in code generation ("'value' object has no
attribute 'dtype'"), unless triton's on-disk cache already holds the compiled kernel - so it shows on a
fresh machine only. Re-importing the kernel module with the variable unset does not help: the patched
builtins live in triton itself.

So one python process, started without TRITON_INTERPRET and importing nothing of the tests, serves every
compile of a test session: `OfflineCompiler.compile` sends it the kernel's import path, signature and
constants, and gets back the compiled text (ptx, ttgir, ...) and the warp count. The request and answer
are pickled over the process's stdin and a private copy of its stdout (anything triton prints goes to
stderr, kept in a file for the error message if the process dies).
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

# Hopper (sm_90a), the only target the compile tests check; no GPU is needed to compile for it.
HOPPER = ("cuda", 90, 32)


@dataclass(frozen=True)
class Compiled:
    """What the tests read from a compiled kernel: `asm` maps a stage ("ttgir", "ptx", ...) to its text."""

    asm: dict[str, str]
    num_warps: int


class OfflineCompiler:
    """A clean compiling process, started on the first compile and stopped by `close` (or `with`); `env`
    adds variables to its environment (TRITON_CACHE_DIR, say)."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._extra_env = dict(env or {})
        self._process: subprocess.Popen | None = None
        self._stderr = None

    def compile(
        self,
        kernel: str,
        signature: dict[str, str],
        constexprs: dict[str, object],
        divisible_by_16: tuple[str, ...] = (),
        gluon: bool = False,
        target: tuple[str, int, int] = HOPPER,
        **options: object,
    ) -> Compiled:
        """Compile `kernel` ("package.module:function") for `target`.

        `signature` maps every argument to its type ("*bf16", "i32", "constexpr", ...), in the kernel's
        order; `constexprs` gives the compile-time values; `divisible_by_16` names the arguments known to be
        multiples of 16 (pointers from torch's allocations, aligned sizes); `options` are triton's
        (num_warps, maxnreg, ...). `gluon` compiles with Gluon's front end.
        """
        unknown = [name for name in divisible_by_16 if name not in signature]
        if unknown:
            raise ValueError(f"compile {kernel}: divisible_by_16 names {unknown}, not in its signature")
        request = dict(
            kernel=kernel,
            signature=signature,
            constexprs=constexprs,
            divisible_by_16=tuple(divisible_by_16),
            gluon=gluon,
            target=target,
            options=options,
        )
        answer = self._ask(request)
        if "error" in answer:
            raise RuntimeError(f"compiling {kernel} for {target} failed:\n{answer['error']}")
        return Compiled(asm=answer["asm"], num_warps=answer["num_warps"])

    def close(self) -> None:
        if self._process is not None:
            self._process.stdin.close()  # the server's loop ends at end of input
            self._process.wait()
            self._process.stdout.close()
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self) -> OfflineCompiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> subprocess.Popen:
        import mla_debug

        env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
        env.update(self._extra_env)
        # The package the tests import, also where it is not installed (a plain checkout on sys.path).
        package_root = str(Path(mla_debug.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        self._stderr = tempfile.TemporaryFile()
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )

    def _ask(self, request: dict) -> dict:
        if self._process is None:
            self._process = self._start()
        try:
            pickle.dump(request, self._process.stdin)
            self._process.stdin.flush()
            return pickle.load(self._process.stdout)
        except (BrokenPipeError, EOFError):
            code = self._process.wait()
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace")[-4000:]
            self._process = None
            raise RuntimeError(f"the compiling process exited with status {code}:\n{tail}") from None


def _compile(request: dict) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget

    module_name, _, name = request["kernel"].partition(":")
    kernel = getattr(importlib.import_module(module_name), name)
    if request["gluon"]:
        from triton.experimental.gluon._runtime import GluonASTSource as Source
    else:
        from triton.compiler import ASTSource as Source
    names = list(request["signature"])
    attrs = {(names.index(arg),): [["tt.divisibility", 16]] for arg in request["divisible_by_16"]}
    source = Source(fn=kernel, signature=request["signature"], constexprs=request["constexprs"], attrs=attrs)
    compiled = triton.compile(source, target=GPUTarget(*request["target"]), options=request["options"])
    asm = {stage: text for stage, text in compiled.asm.items() if isinstance(text, str)}
    return dict(asm=asm, num_warps=compiled.metadata.num_warps)


def serve() -> None:
    """Answer compile requests from stdin until it closes; one answer per request, errors as text."""
    requests = sys.stdin.buffer
    # The answers get a stdout of their own: whatever triton or a kernel module prints must not end up
    # inside a pickle.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while True:
        try:
            request = pickle.load(requests)
        except EOFError:
            return
        try:
            answer = _compile(request)
        except Exception:
            answer = dict(error=traceback.format_exc())
        pickle.dump(answer, answers)
        answers.flush()


if __name__ == "__main__":
    serve()
