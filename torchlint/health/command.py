"""`torchlint doctor MODULE:FACTORY`: the health check, and with `--memory` the step's memory, from the command line.

Whatever the user's module or factory raises becomes one line and exit 2 (`--traceback`
prints the traceback too); the findings' exit codes are `check`'s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import linecache
import os
import re
import sys
import traceback
from typing import List, Optional, Tuple

from torchlint.finding import Finding, Location
from torchlint.health.checks import ERROR, Report, check, message_of, severity
from torchlint.health.deadline import DEFAULT_SECONDS, Deadline, end_process
from torchlint.health.user_code import innermost_user_frame, shown_path

# Cards for `--target-memory NAME`: the memory each is sold with, in GiB. torch can allocate a little less
# (ECC, the CUDA context), which is why the table is a ceiling, not a promise.
GPUS = {
    "T4": 16, "L4": 24, "A10G": 24, "RTX 3090": 24, "RTX 4090": 24, "V100-16GB": 16, "V100-32GB": 32,
    "A100-40GB": 40, "A100-80GB": 80, "H100-80GB": 80,
}
_UNITS = {"": 1, "b": 1, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9, "tb": 10 ** 12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
# Codes of the check whose presence means the step did not run to its end, so there is nothing to measure.
_STEP_FAILED = ("TL901", "TL905", "TL203", "TL915")


def register(subparsers) -> None:
    doctor = subparsers.add_parser("doctor", help="check a live model, loader and criterion by running one step")
    doctor.add_argument("target", metavar="MODULE:FACTORY",
                        help="a function returning (model, loader[, criterion[, optimizer]]) or a dict of those")
    doctor.add_argument("--output-format", choices=("full", "concise", "json", "github", "sarif"), default=None)
    doctor.add_argument("--exit-zero", action="store_true", help="exit 0 even when there are errors")
    doctor.add_argument("-q", "--quiet", action="store_true", help="findings only, no summary")
    doctor.add_argument("--traceback", action="store_true",
                        help="when the module or the factory raises, print the full traceback too")
    doctor.add_argument("--timeout", type=_seconds, default=DEFAULT_SECONDS, metavar="SECONDS",
                        help="the most time each phase may take: the import, the factory, the step, the memory "
                             f"measurement; one that takes longer is reported (default: {DEFAULT_SECONDS:g}; 0: no limit)")
    memory = doctor.add_argument_group("memory of one training step")
    memory.add_argument("--memory", action="store_true",
                        help="measure parameters, gradients, optimizer state and activations, and project the peak")
    memory.add_argument("--batch-size", type=_positive, metavar="N",
                        help="project the memory to this batch size (implies --memory)")
    memory.add_argument("--target-memory", metavar="SIZE|GPU",
                        help="exit 1 (TL917) when the projected peak does not fit: 24GiB, 16GB, 512MiB, or a GPU name "
                             f"({', '.join(GPUS)}); implies --memory")
    doctor.set_defaults(handler=run_doctor)


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive batch size, got {text!r}")
    return value


def _seconds(text: str) -> float:
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds (0: no limit), got {text!r}")
    return value


def parse_target(text: str) -> Tuple[int, str]:
    """(bytes, how to name it) for `24GiB`, `16GB`, `1.5TiB`, `1000000` or a GPU of `GPUS`."""
    from torchlint.cli import UsageError

    wanted = _gpu_key(text)
    for name, gib in GPUS.items():
        if _gpu_key(name) == wanted:
            return gib * 2 ** 30, f"{name} ({gib} GiB)"
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if unit not in _UNITS:
        raise UsageError(f"--target-memory: expected a size such as 24GiB or 16GB, or a GPU ({', '.join(GPUS)}); got {text!r}")
    return int(float(match.group(1)) * _UNITS[unit]), text.strip()


def _gpu_key(name: str) -> str:
    key = re.sub(r"[^a-z0-9]", "", name.lower())
    for prefix in ("nvidia", "geforce", "tesla"):
        key = key.removeprefix(prefix)
    return key


# ---------------------------------------------------------------- the user's module and factory


class UserCodeFailed(Exception):
    """The module or the factory raised: `line` says what and where, `error` keeps the traceback for --traceback."""

    def __init__(self, line: str, error: BaseException):
        super().__init__(line)
        self.line = line
        self.error = error


def load_factory(target: str):
    from torchlint.cli import UsageError

    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"expected MODULE:FACTORY, got {target!r}")
    # As `python -m`: modules in the working directory are importable.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):  # the module named on the command line
            raise UsageError(f"cannot import {module_name!r}: {error}") from None
        raise UserCodeFailed(f"cannot import {module_name!r}: {_exception(error)}", error) from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # anything at import: a syntax error, sys.exit from argparse, a BaseException of theirs
        raise UserCodeFailed(f"cannot import {module_name!r}: {_exception(error)}", error) from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise UsageError(f"{module_name!r} has no function {attribute!r}")
    return factory


def call_factory(target: str, factory):
    try:
        inspect.signature(factory).bind()
    except TypeError as error:  # doctor has nothing to pass
        where = _definition(factory)
        raise UserCodeFailed(f"{target} needs arguments, and doctor calls it with none (TypeError: {error})"
                             + (f" ({where})" if where else ""), error) from None
    except ValueError:  # no signature to read (some builtins): calling it tells
        pass
    try:
        return factory()
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # SystemExit, GeneratorExit, a BaseException subclass of theirs
        raise UserCodeFailed(f"{target} raised {_exception(error)}", error) from None


def _exception(error: BaseException) -> str:
    """`Type: first line of the message (file:line, in function)`, at the innermost frame of the user's code."""
    if isinstance(error, SyntaxError):
        where = f"{shown_path(error.filename or '?')}:{error.lineno}" if error.lineno else shown_path(error.filename or "?")
        return f"{type(error).__name__}: {error.msg} ({where})"
    first = (message_of(error).strip().splitlines() or [""])[0][:200]
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    frame = innermost_user_frame(traceback.extract_tb(error.__traceback__))
    return f"{text} ({shown_path(frame.filename)}:{frame.lineno}, in {frame.name})" if frame else text


def _definition(factory) -> Optional[str]:
    try:
        path = inspect.getsourcefile(factory)
        _, line = inspect.getsourcelines(factory)
    except (OSError, TypeError):
        return None
    return f"{shown_path(path)}:{line}, in {getattr(factory, '__name__', '?')}" if path else None


def unpack(made) -> tuple:
    """(model, loader, criterion, optimizer, extras) from the factory's tuple or dict; extras are the dict's other keys."""
    if isinstance(made, dict):
        return made.get("model"), made.get("loader"), made.get("criterion"), made.get("optimizer"), made
    if isinstance(made, (tuple, list)) and 2 <= len(made) <= 4:
        return tuple(made) + (None,) * (4 - len(made)) + ({},)
    return None, None, None, None, {}


# ---------------------------------------------------------------- the command


def run_doctor(args) -> int:
    from torchlint import cli

    try:
        # Imported before any phase is timed: torch's own import (seconds on a busy machine) is not the user's code.
        import torch  # noqa: F401
    except ImportError:
        raise cli.UsageError("doctor runs a training step: it needs torch (pip install torch)") from None
    deadline = Deadline(args.timeout)
    took_too_long = f"did not finish within {args.timeout:g} s (--timeout)"
    module_name = args.target.partition(":")[0]
    try:
        with _own_command_line(args.target):
            with deadline.phase(lambda where: _fail_now(f"cannot import {module_name!r}: it {took_too_long}{where}")):
                factory = load_factory(args.target)
            with deadline.phase(lambda where: _fail_now(f"{args.target} {took_too_long}{where}")):
                made = call_factory(args.target, factory)
    except UserCodeFailed as failure:
        if args.traceback:
            traceback.print_exception(type(failure.error), failure.error, failure.error.__traceback__, file=sys.stderr)
        hint = "" if args.traceback else "; --traceback shows the full traceback"
        raise cli.UsageError(failure.line + hint) from None
    model, loader, criterion, optimizer, extras = unpack(made)
    if not _is_module(model) or loader is None:
        raise cli.UsageError(f"{args.target} must return (model, loader[, criterion[, optimizer]]) or a dict with those keys")
    target = parse_target(args.target_memory) if args.target_memory else None
    memory = args.memory or args.batch_size or target

    def step_expired(where: str):
        stuck = Report(args.target)
        stuck.add("TL905", f"the first training step {took_too_long}{where}: the loader, the forward, the criterion "
                           "or backward() never returned")
        notes = ["Memory: not measured, the step does not finish (TL905)."] if memory else []
        end_process(_emit(args, stuck.findings, notes, factory))

    with deadline.phase(step_expired):
        findings = _guarded(args, "the health check", lambda: check(model, loader, criterion, optimizer, source=args.target))
    notes: List[str] = []
    if memory:
        def measurement_expired(where: str):
            end_process(_emit(args, findings, notes + [f"Memory: not measured: the measurement {took_too_long}{where}."], factory))

        with deadline.phase(measurement_expired):
            findings += _guarded(args, "the memory measurement",
                                 lambda: _memory(args, model, loader, criterion, optimizer, extras, target, findings, notes))
    return _emit(args, findings, notes, factory)


def _guarded(args, what: str, run):
    """`run()`, where a BaseException of the user's code that no Exception handler caught (their own subclass,
    a SystemExit in a forward) is one line, as the factory's is."""
    from torchlint import cli

    try:
        return run()
    except (KeyboardInterrupt, cli.UsageError):
        raise
    except BaseException as error:
        if args.traceback:
            traceback.print_exception(type(error), error, error.__traceback__, file=sys.stderr)
        hint = "" if args.traceback else "; --traceback shows the full traceback"
        raise cli.UsageError(f"{what} of {args.target} stopped: {_exception(error)}{hint}") from None


def _fail_now(line: str):
    print(f"torchlint: error: {line}", file=sys.stderr)
    end_process(2)


def _emit(args, findings: List[Finding], notes: List[str], factory) -> int:
    """Print the findings in the chosen format, the notes and the summary; the exit code they make."""
    from torchlint import cli
    from torchlint.reporters import REPORTERS

    output_format = args.output_format or ("full" if sys.stdout.isatty() else "concise")
    shown, sources = _at_definition(findings, factory) if output_format == "sarif" else (findings, {})
    sys.stdout.write(REPORTERS[output_format](shown, sources, False))
    errors = [finding for finding in findings if severity(finding) == ERROR]
    # Only the text formats share standard output with people's lines: the others' must stay one document.
    stream = sys.stdout if output_format in cli.TEXT_FORMATS else sys.stderr
    if notes:
        stream.write("".join(note + "\n" for note in notes))
    if not args.quiet:
        stream.write(summary(findings, errors) + "\n")
    return cli.EXIT_FINDINGS if errors and not args.exit_zero else cli.EXIT_CLEAN


@contextlib.contextmanager
def _own_command_line(target: str):
    """`sys.argv` as a module run without arguments sees it: an argparse at import must not parse doctor's options."""
    saved = sys.argv
    sys.argv = [target.partition(":")[0]]
    try:
        yield
    finally:
        sys.argv = saved


def _is_module(model) -> bool:
    import torch

    return isinstance(model, torch.nn.Module)


def _memory(args, model, loader, criterion, optimizer, extras, target, findings, notes) -> List[Finding]:
    """The memory findings (TL917, TL918); the report itself goes to `notes`."""
    from torchlint.health.memory import Autocast, MeasurementFailed, measure

    failed = sorted({finding.code for finding in findings if finding.code in _STEP_FAILED})
    if failed:
        notes.append(f"Memory: not measured, the step does not run ({', '.join(failed)}).")
        return []
    autocast = Autocast.from_factory(extras.get("autocast"), extras.get("scaler"))
    try:
        report = measure(model, loader, criterion, optimizer, autocast)
    except MeasurementFailed as failure:
        notes.append(f"Memory: not measured: {failure}.")
        return []
    except Exception as error:  # the user's model did something the measurement cannot follow
        if args.traceback:
            traceback.print_exc(file=sys.stderr)
        notes.append(f"Memory: not measured: {_exception(error)}.")
        return []
    size = args.batch_size or report.batch_size
    notes.append(render(report, size, target))
    out = Report(args.target)
    reason = report.linearity()
    if reason and size != report.batch_size:
        out.add("TL918", f"{reason}: the projection to batch size {size} follows that line and may be off")
    if target and report.peak(size).bytes > target[0]:
        out.add("TL917", _does_not_fit(report, size, target), memory=report.as_json(size), target_memory=target[0])
    return out.findings


def _does_not_fit(report, size: int, target: Tuple[int, str]) -> str:
    from torchlint.health.memory import format_bytes

    budget, name = target
    peak = report.peak(size)
    largest = report.largest_batch_within(budget)
    if largest is None:
        advice = "not even batch size 1 fits: shrink the model, or use lower precision or a smaller optimizer state"
    else:
        advice = f"batch size {largest} fits by this projection"
    return (f"the projected peak of one training step at batch size {size}, {format_bytes(peak.bytes)} "
            f"({peak.bytes:,} bytes, in the {peak.phase}), does not fit in {name}: {format_bytes(peak.bytes - budget)} "
            f"over; {advice}")


def render(report, size: int, target: Optional[Tuple[int, str]]) -> str:
    """The memory report as text: one row per part, in bytes and in binary units."""
    from torchlint.health.memory import format_bytes

    measured = size == report.batch_size
    header = (f"Memory of one training step at batch size {size} "
              + ("(the loader's)" if measured else f"(projected from the loader's {report.batch_size})")
              + f", on {report.device}, parameters {report.dtypes}, autocast {report.autocast or 'off'}:")
    peak = report.peak(size)
    rows = [
        ("parameters", report.parameters, ""),
        ("buffers", report.buffers, ""),
        ("gradients", report.gradients, "measured after one backward"),
        ("optimizer state", report.optimizer_state,
         f"{report.optimizer}, {report.optimizer_how}" if report.optimizer else report.optimizer_how),
        ("batch", report.batch(size), "inputs and labels"),
        ("activations", report.activations(size), "saved for backward"),
        ("projected peak", peak.bytes, f"in the {peak.phase}; {report.peak_how}"),
    ]
    lines = [header] + [f"  {name:<16}{count:>17,} B  {format_bytes(count):>11}" + (f"  {how}" if how else "")
                        for name, count, how in rows]
    lines.append("  " + _scaling(report))
    if not measured:
        lines.append(f"  at the loader's batch size {report.batch_size} the peak is {format_bytes(report.peak(report.batch_size).bytes)}")
    lines += [f"  note: {note}" for note in report.notes]
    if target:
        budget, name = target
        spare = budget - peak.bytes
        lines.append(f"  {'fits in' if spare >= 0 else 'does not fit in'} {name}: "
                     f"{format_bytes(abs(spare))} {'to spare' if spare >= 0 else 'over'}")
    return "\n".join(lines)


def _scaling(report) -> str:
    from torchlint.health.memory import format_bytes

    sizes = ", ".join(str(step.batch_size) for step in sorted(report.steps, key=lambda step: step.batch_size))
    if len(report.steps) == 1:
        return f"only batch size {sizes} could be measured: other sizes are projected in proportion, unchecked"
    activations = report.activation_line()
    fixed = f" + {format_bytes(activations.fixed)} whatever the batch" if abs(activations.fixed) >= 1024 else ""
    line = f"activations: {format_bytes(activations.per_sample)} per sample{fixed}; measured at batch {sizes}"
    if not report.linearity_checked():
        return line + "; two sizes give the line, a third would check it"
    reason = report.linearity()
    return line + (f"; {reason}" if reason else "; linear in the batch size")


def _at_definition(findings: List[Finding], factory) -> tuple:
    """(the findings placed on the factory's `def` line, {its file: its text}), for SARIF, whose locations are lines of files.

    A factory whose source cannot be found keeps the `MODULE:FACTORY` name.
    """
    try:
        path = inspect.getsourcefile(factory)
        _, line = inspect.getsourcelines(factory)
    except (OSError, TypeError):  # built in, or defined where no source is kept
        return findings, {}
    if path is None:
        return findings, {}
    at = Location(line, 1)
    placed = [dataclasses.replace(finding, filename=path, location=at, end_location=at) for finding in findings]
    # inspect has just read the file into linecache: its text, for the results' fingerprints.
    return placed, {path: "".join(linecache.getlines(path))}


def summary(findings: List[Finding], errors: List[Finding]) -> str:
    if not findings:
        return "All checks passed!"
    codes = ", ".join(sorted({finding.code for finding in errors}))
    listed = f" ({codes})" if codes else ""
    return f"Found {len(findings)} problem(s): {len(errors)} error(s){listed}, {len(findings) - len(errors)} warning(s)."
