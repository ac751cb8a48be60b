"""A long-lived process that runs `fuseforge run` commands one after another,
so that `fuseforge bench` pays for starting Python, importing torch and its
tracer, and initializing CUDA once per suite instead of once per problem.

`Worker` (the bench's side) starts `python -m fuseforge.harness.worker` in its
own process group and sends it one command per line on stdin; the worker runs
`fuseforge.harness.cli.main(argv)` and answers one JSON line with the exit
code. A problem stays isolated from the bench: a crash, a hang (killed after
the timeout) or an error ends that worker, and the next command starts a
fresh one. Between problems the worker puts back the precision flags and
environment a problem file may have changed and drops torch.compile's state.
Everything the commands print goes to a log file, which the bench reads for
the failure message of each command.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

#: torch.compile's compile worker pool: each process would start one per CPU
#: and wait for it at exit (about 9 s per problem on a 16-core machine), while
#: a bench's commands find inductor's kernels in its disk cache.
_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1"}


@dataclass
class Result:
    """How one command ended: its exit code (negative: the signal that killed
    the worker; None: timed out) and what it printed to stderr."""

    returncode: int | None
    stderr: str


class Worker:
    """The bench's handle on one worker process (started at the first run)."""

    def __init__(self, env: dict[str, str] | None = None):
        self.env = {**os.environ, **_ENV, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.TemporaryFile(mode="w+", prefix="fuseforge-worker-")

    def _start(self) -> subprocess.Popen:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "fuseforge.harness.worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=self.env,
            start_new_session=True,
        )
        return self.proc

    def run(self, argv: Sequence[str], timeout: float) -> Result:
        """Runs `fuseforge <argv>` in the worker, waiting at most `timeout` s."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        self.log.seek(0, os.SEEK_END)
        start = self.log.tell()
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps(list(argv)) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else None
        if line is None:
            self.close()
            code: int | None = None
        elif line:
            code = json.loads(line)["rc"]
            if code not in (0, 1):  # the worker ends after a failure (serve)
                self.close()
        else:  # the worker died: its exit status says how
            code = proc.wait()
            self.proc = None
        self.log.seek(start)
        return Result(code, self.log.read())

    def close(self) -> None:
        """Ends the worker and everything it started (inductor's workers too)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self.log.close()


#: The settings a problem file may change that decide other problems'
#: numerics or speed: (object under torch.backends, attribute).
#: torch.set_float32_matmul_precision's setting is put back first, and then these.
_FLAGS = (
    ("", "fp32_precision"),
    ("cuda.matmul", "fp32_precision"),
    ("mkldnn", "fp32_precision"),
    ("mkldnn.matmul", "fp32_precision"),
    ("cudnn", "fp32_precision"),
    ("cudnn.conv", "fp32_precision"),
    ("cudnn.rnn", "fp32_precision"),
    ("cudnn", "benchmark"),
    ("cudnn", "deterministic"),
)


def _flag_owner(path: str) -> object:
    import torch

    owner: object = torch.backends
    for part in filter(None, path.split(".")):
        owner = getattr(owner, part)
    return owner


def _flags() -> list:
    import torch

    return [torch.get_float32_matmul_precision(), *(getattr(_flag_owner(path), name) for path, name in _FLAGS)]


def _restore(flags: list, environ: dict[str, str]) -> None:
    import torch

    torch.set_float32_matmul_precision(flags[0])
    for (path, name), value in zip(_FLAGS, flags[1:]):
        setattr(_flag_owner(path), name, value)
    os.environ.clear()
    os.environ.update(environ)


def serve() -> None:
    """The worker's loop: one command per stdin line, one answer per line on
    the original stdout (the commands' own output goes to stderr's log)."""
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import gc

    import torch

    from fuseforge.harness import cli

    flags, environ = _flags(), dict(os.environ)
    for line in sys.stdin:
        try:
            rc = cli.main(json.loads(line))
        except SystemExit as e:  # a problem file exited: so does its worker
            rc = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
        answers.write(json.dumps({"rc": rc}) + "\n")
        answers.flush()
        if rc not in (0, 1):  # an error may have left CUDA unusable: the next command gets a new worker
            return
        _restore(flags, environ)
        torch._dynamo.reset()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


if __name__ == "__main__":
    serve()
