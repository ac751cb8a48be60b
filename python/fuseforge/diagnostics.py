"""One-line reasons for failures: what failed, where in the user's code, and
what to do, for the command line (exit 2) and for the warning that
`fuseforge.optimize` and the torch.compile backend give when they fall back to
eager. torch's own messages run to dozens of lines (a graph dump, logging
advice); the line that matters is picked out here."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import traceback
from collections.abc import Iterator

#: Longest message kept (the rest of a torch message is advice about torch).
MAX_MESSAGE = 300

# (pattern in the message, what to do): the first match gives the hint.
_HINTS = (
    (
        r"data-dependent|GuardOnDataDependent",
        "control flow or sizes depend on tensor values; use torch.where instead of `if` on a tensor, "
        "or leave that part out of the optimized module",
    ),
    (
        r"dynamic size",
        "the op's output size depends on the data (nonzero, masked_select, unique): fuseforge graphs have static shapes",
    ),
    (
        r"dtype torch\.complex|is not supported by the IR",
        "that dtype (complex numbers, e.g. from torch.fft; 8- and 16-bit integers) is outside fuseforge's IR; "
        "run that part eagerly",
    ),
    (r"mutates its input", "clone the input before writing to it (x = x.clone()), or write to a buffer instead"),
    (
        r"must have same|size mismatch|shape .* is invalid|cannot be multiplied|does not match|Expected .*size",
        "the model fails on these inputs: check get_inputs() (or the call's arguments) against the model",
    ),
)


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def user_location(exc: BaseException, user_file: str | os.PathLike | None) -> str | None:
    """'FILE:LINE in FUNC: code' of the innermost frame in `user_file` among
    the exception chain's tracebacks and the locations torch quotes in its
    messages; None if none is there (or no file is given)."""
    if user_file is None:
        return None
    want = os.path.realpath(os.fspath(user_file))
    found: tuple[str, int, str, str] | None = None
    for e in _chain(exc):
        if isinstance(e, SyntaxError) and e.filename and os.path.realpath(e.filename) == want:
            return f"{os.path.basename(want)}:{e.lineno}: {(e.text or '').strip()}"
        for frame in traceback.extract_tb(e.__traceback__):
            if os.path.realpath(frame.filename) == want:
                found = (frame.filename, frame.lineno or 0, frame.name, (frame.line or "").strip())
        if found is None:
            for m in re.finditer(r'File "([^"]+)", line (\d+), in (\w+)\n\s*(.*)', str(e)):
                if os.path.realpath(m.group(1)) == want:
                    found = (m.group(1), int(m.group(2)), m.group(3), m.group(4).strip())
    if found is None:
        return None
    return f"{os.path.basename(found[0])}:{found[1]} in {found[2]}: {found[3]}"


def first_line(exc: BaseException) -> str:
    """The exception's type and the first non-empty line of its message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else ""
    if isinstance(exc, SyntaxError):
        text = exc.msg
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE] + "…"
    if isinstance(exc, (ValueError, FileNotFoundError)) or type(exc).__name__ == "CaptureError":
        return text  # fuseforge's own messages say what is wrong
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def hint(exc: BaseException) -> str | None:
    """What to do about it, for the failures that have a known remedy."""
    for e in _chain(exc):  # the outermost message first: it names the failure
        for pattern, advice in _HINTS:
            if re.search(pattern, str(e)):
                return advice
    return None


def one_line(exc: BaseException, user_file: str | os.PathLike | None = None) -> str:
    """'MESSAGE (at FILE:LINE in FUNC: code) — HINT' on one line."""
    text = first_line(exc)
    where = user_location(exc, user_file)
    if where:
        text += f" (at {where})"
    advice = hint(exc)
    if advice:
        text += f" — {advice}"
    return " ".join(text.split())


@contextlib.contextmanager
def quiet_torch() -> Iterator[None]:
    """torch's loggers at CRITICAL: a failed torch.export logs the partial
    graph and debugging advice, which the one-line message replaces."""
    loggers = [
        logging.getLogger(n)
        for n in (
            "torch",
            "torch.fx.experimental.symbolic_shapes",
            "torch._dynamo",
            "torch.export",
            "torch._export",
            "torch._subclasses",
        )
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """'1 kernel', '2 kernels', '1 library call', '0 library calls'."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
