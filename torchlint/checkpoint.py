"""`torchlint checkpoint PATH...`: will each checkpoint file load under `torch.load(weights_only=True)`?

torch 2.6 made `weights_only=True` the default of `torch.load`. This command tells, for files that
exist, whether they still load, and what to change when they do not. Nothing in a file is ever run:
the pickle is read by an unpickler whose every global is an inert stand-in (`_Stub`), and the only
real load is torch's own weights-only one, made after the scan found nothing it refuses.

Nothing heavy is imported at module import: the linter loads this module for every command.
"""

from __future__ import annotations

import _compat_pickle
import io
import json
import pickle
import sys
import zipfile
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Tuple

LOADS, REFUSED, UNREADABLE = "loads", "refused", "unreadable"
NEEDS_TORCH = "torchlint checkpoint needs torch to read checkpoints: pip install 'torchlint[verify]'"
# How many keys are shown for each global, and how much of a pickle is walked for them.
_KEYS_SHOWN = 3
_MAX_WALKED = 100_000
_MAX_DEPTH = 12
# The first pickle of a file written with `_use_new_zipfile_serialization=False` is this number.
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
# Save-side changes for what a checkpoint commonly holds, by the start of the global's name.
_CHANGES = (
    ("argparse.Namespace", "save `vars(args)` (a dict) instead of the Namespace"),
    ("types.SimpleNamespace", "save `vars(ns)` (a dict) instead of the namespace"),
    ("numpy._core.multiarray.scalar", "save numpy scalars as Python numbers (`x.item()`, `float(x)`)"),
    ("numpy.core.multiarray.scalar", "save numpy scalars as Python numbers (`x.item()`, `float(x)`)"),
    ("numpy._core.multiarray._reconstruct", "save numpy arrays as tensors (`torch.from_numpy(a)`) or lists (`a.tolist()`)"),
    ("numpy.core.multiarray._reconstruct", "save numpy arrays as tensors (`torch.from_numpy(a)`) or lists (`a.tolist()`)"),
    ("pathlib.", "save paths as strings (`str(path)`)"),
    ("torch.nn.", "save the module's `state_dict()`, not the module"),
    ("torch.optim.", "save the optimizer's or scheduler's `state_dict()`, not the object"),
    ("collections.defaultdict", "save `dict(d)` instead of the defaultdict"),
    ("functools.partial", "save what the partial is built from (the function's name and arguments)"),
    ("datetime.", "save dates as strings (`d.isoformat()`)"),
)
# Globals that come with another one and need no change of their own (numpy's dtypes come with its values).
_FOLLOWERS = ("numpy.dtype", "numpy.dtypes.", "numpy.ndarray", "builtins.int", "builtins.float", "builtins.list")


@dataclass
class Inspection:
    path: str
    status: str
    # The globals a weights-only load refuses, and for each the keys that hold it (`["args"]`; "" for the
    # saved object itself).
    refused_globals: List[str] = field(default_factory=list)
    keys: Dict[str, List[str]] = field(default_factory=dict)
    changes: List[str] = field(default_factory=list)
    allow_list: str = ""
    error: str = ""
    format: str = ""

    @property
    def exit_code(self) -> int:
        return {LOADS: 0, REFUSED: 1}.get(self.status, 2)


def register(subparsers) -> None:
    command = subparsers.add_parser(
        "checkpoint", help="tell whether checkpoint files load under torch.load(weights_only=True), torch 2.6's default",
    )
    command.add_argument("paths", nargs="+", metavar="PATH", help="checkpoint files written by torch.save")
    command.add_argument(
        "--output-format", choices=("full", "concise", "json"), default="full",
        help="full: what blocks the load and what to change; concise: one line a file; json",
    )
    command.set_defaults(handler=run_checkpoint)


def run_checkpoint(args) -> int:
    try:
        import torch  # noqa: F401
    except ImportError:
        print(NEEDS_TORCH, file=sys.stderr)
        return 2
    inspections = [inspect(path) for path in args.paths]
    if args.output_format == "json":
        sys.stdout.write(json.dumps([asdict(inspection) for inspection in inspections], indent=2) + "\n")
    else:
        shown = render if args.output_format == "full" else render_concise
        sys.stdout.write("".join(shown(inspection) for inspection in inspections))
        counts = {status: sum(inspection.status == status for inspection in inspections) for status in (LOADS, REFUSED, UNREADABLE)}
        sys.stdout.write(f"{counts[LOADS]} load, {counts[REFUSED]} refused, {counts[UNREADABLE]} unreadable\n")
    return max(inspection.exit_code for inspection in inspections)


def inspect(path: str) -> Inspection:
    """What a weights-only load of the file at `path` does, found without running anything the file holds.

    The file is read as a stream: a checkpoint may be larger than memory, and only its pickle is read (and, when
    it loads, torch maps the zip format's tensors rather than reading them)."""
    try:
        with open(path, "rb") as file:
            start = file.read(2)
            if zipfile.is_zipfile(file):
                return _inspect_zip(path)
            file.seek(0)
            return _inspect_legacy(path, file, start)
    except OSError as error:
        return Inspection(path, UNREADABLE, error=f"cannot read the file: {error.strerror or error}")
    except Exception as error:  # a damaged file can fail anywhere in torch's reader or the scan
        return Inspection(path, UNREADABLE, error=_first_line(error))


def _inspect_zip(path: str) -> Inspection:
    import torch

    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pickles = [name for name in names if name.endswith("/data.pkl") or name == "data.pkl"]
        if any(name.endswith("/constants.pkl") for name in names) and any("/code/" in name for name in names):
            return Inspection(path, UNREADABLE, error="a TorchScript archive: load it with `torch.jit.load`", format="torchscript")
        if len(pickles) != 1:
            return Inspection(path, UNREADABLE, error="not a checkpoint written by torch.save (no data.pkl in the archive)")
        pickled = archive.read(pickles[0])
    refused = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    # torch lists the globals its opcodes name; the scan sees the ones named through the memo too (numpy's dtype
    # classes), which the load refuses as well.
    root, seen = _scan(io.BytesIO(pickled))
    refused |= (seen | _dtype_classes(root)) - _allowed_globals()
    inspection = Inspection(path, REFUSED if refused else LOADS, format="zip")
    if not refused:
        _confirm_load(inspection, mmap=True)
    return _explain(inspection, refused, root)


def _inspect_legacy(path: str, stream, start: bytes) -> Inspection:
    """A file written with `_use_new_zipfile_serialization=False` (torch before 1.6): pickles one after another,
    then the tensors' bytes."""
    if start == b"PK":
        return Inspection(path, UNREADABLE, error="a damaged zip archive (truncated or cut short while it was written)")
    if not start.startswith(b"\x80"):
        return Inspection(path, UNREADABLE, error="not a checkpoint written by torch.save (neither a zip archive nor a pickle)")
    try:
        magic = _StubUnpickler(stream).load()
    except Exception:
        return Inspection(path, UNREADABLE, error="not a checkpoint written by torch.save (an unreadable pickle)")
    if magic != _LEGACY_MAGIC:
        return Inspection(path, UNREADABLE, error="a pickle, but not a checkpoint written by torch.save")
    # The protocol version and the system's description come before the saved object.
    root, seen = _scan(stream, skip=2)
    refused = (seen | _dtype_classes(root)) - _allowed_globals()
    inspection = Inspection(path, REFUSED if refused else LOADS, format="legacy")
    if not refused:
        _confirm_load(inspection, mmap=False)
    return _explain(inspection, refused, root)


def _confirm_load(inspection: Inspection, mmap: bool) -> None:
    """Load the file the way torch 2.6 does by default (safe: the weights-only unpickler runs no code); `mmap` maps
    a zip file's tensors instead of reading them (the legacy format cannot be mapped)."""
    import torch

    try:
        torch.load(inspection.path, weights_only=True, map_location="cpu", mmap=mmap)
    except pickle.UnpicklingError as error:
        inspection.status = REFUSED
        inspection.error = _refusal(error)
    except Exception as error:
        inspection.status = UNREADABLE
        inspection.error = _first_line(error)


def _explain(inspection: Inspection, refused: set, root) -> Inspection:
    inspection.refused_globals = sorted(refused)
    if not refused:
        return inspection
    holders = _holders(root, refused)
    inspection.keys = {name: holders.get(name, [])[:_KEYS_SHOWN] for name in inspection.refused_globals}
    changes = []
    for name in inspection.refused_globals:
        change = next((text for prefix, text in _CHANGES if name.startswith(prefix)), None)
        if change is None and not name.startswith(_FOLLOWERS):
            change = f"save the fields of the `{name}` objects as plain values (a dict of numbers, strings, tensors)"
        if change is not None and change not in changes:
            changes.append(change)
    inspection.changes = changes
    modules = sorted({name.rpartition(".")[0].split(".")[0] for name in inspection.refused_globals if "." in name} - {"builtins"})
    listed = ", ".join(name.partition("builtins.")[2] or name for name in inspection.refused_globals)
    imports = f"import {', '.join(modules)}; " if modules else ""
    inspection.allow_list = f"{imports}torch.serialization.add_safe_globals([{listed}])"
    return inspection


def render_concise(inspection: Inspection) -> str:
    if inspection.status == REFUSED:
        return f"{inspection.path}: refused by weights_only=True: {', '.join(inspection.refused_globals) or inspection.error}\n"
    return render(inspection)


def render(inspection: Inspection) -> str:
    if inspection.status == LOADS:
        return f"{inspection.path}: loads with weights_only=True\n"
    if inspection.status == UNREADABLE:
        return f"{inspection.path}: cannot read: {inspection.error}\n"
    lines = [f"{inspection.path}: refused by weights_only=True (the default of torch.load since torch 2.6)"]
    if inspection.error:
        lines.append(f"  torch: {inspection.error}")
    for name in inspection.refused_globals:
        keys = inspection.keys.get(name) or []
        shown = ", ".join(key or "the saved object" for key in keys)
        if not shown and name.startswith(_FOLLOWERS):
            shown = "(rebuilt with the values above)"
        else:
            shown = f"at {shown}" if shown else ""
        lines.append(f"  {name}" + (f"  {shown}" if shown else ""))
    if inspection.changes:
        lines.append("  to make the file load, change what is saved:")
        lines += [f"    {change}" for change in inspection.changes]
    if inspection.allow_list:
        lines.append("  or, for a file you trust, allow its globals before loading:")
        lines.append(f"    {inspection.allow_list}")
        if any(name.startswith("__main__.") for name in inspection.refused_globals):
            lines.append("    (`__main__.X` is a class of the script that saved the file: import it from where it lives)")
    return "".join(line + "\n" for line in lines)


# ---------------------------------------------------------------------------- reading a pickle without running it


class _Stub:
    """Whatever a pickle builds from a global: records what it was given, runs nothing."""

    global_name = ""

    def __new__(cls, *args, **kwargs):
        # NEWOBJ builds with `__new__` alone: what it was given is kept here.
        stub = object.__new__(cls)
        stub.parts = list(args) + list(kwargs.values())
        return stub

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        # A global used as a function (`torch._utils._rebuild_tensor_v2(...)`) is a class here; an object that
        # is called again gives another stand-in.
        return _stub_class(self.global_name)(*args, **kwargs)

    def __setstate__(self, state):
        self.parts.append(state)

    def __setitem__(self, key, value):
        self.parts.append({key: value})

    def append(self, value):
        self.parts.append(value)

    def extend(self, values):
        self.parts.extend(values)


_STUBS: Dict[str, type] = {}


def _stub_class(name: str) -> type:
    if name not in _STUBS:
        _STUBS[name] = type("Stub", (_Stub,), {"global_name": name})
    return _STUBS[name]


class _StubUnpickler(pickle.Unpickler):
    def __init__(self, file, seen: Optional[set] = None):
        super().__init__(file)
        self.seen = seen if seen is not None else set()

    def find_class(self, module: str, name: str):
        # Protocol 2 pickles name Python 2's modules (`__builtin__.set`); pickle maps them back the same way (no
        # Python 3 module has those names).
        if (module, name) in _compat_pickle.NAME_MAPPING or module in _compat_pickle.IMPORT_MAPPING:
            module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
            module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        qualified = f"{module}.{name}"
        self.seen.add(qualified)
        return _stub_class(qualified)

    def persistent_load(self, pid):
        return _stub_class("<storage>")()


def _scan(stream, skip: int = 0) -> Tuple[object, set]:
    """The saved object read from `stream`, with stand-ins for every global, and the globals its pickle names
    (after `skip` pickles that come before it)."""
    for _ in range(skip):
        _StubUnpickler(stream).load()
    seen: set = set()
    return _StubUnpickler(stream, seen).load(), seen


# numpy's dtype classes by the kind letter of the code a pickled `numpy.dtype("f8", ...)` is rebuilt from.
_DTYPE_KINDS = {"f": "Float", "i": "Int", "u": "UInt", "c": "Complex"}
_DTYPE_CLASSES = {"b": "BoolDType", "O": "ObjectDType", "U": "StrDType", "S": "BytesDType", "V": "VoidDType",
                  "M": "DateTime64DType", "m": "TimeDelta64DType", "f16": "LongDoubleDType", "c32": "CLongDoubleDType"}


def _dtype_classes(root) -> set:
    """The `numpy.dtypes` classes of the dtypes the pickle rebuilds: a weights-only load checks each dtype's class
    too (`Can only build ... but got <class 'numpy.dtypes.Float64DType'>`, observed on torch 2.13, numpy 2.4)."""
    found = set()
    for stub in _stubs(root):
        if stub.global_name == "numpy.dtype" and stub.parts and isinstance(stub.parts[0], str):
            code = stub.parts[0]
            kind, size = code[:1], code[1:]
            name = _DTYPE_CLASSES.get(code) or _DTYPE_CLASSES.get(kind)
            if name is None and kind in _DTYPE_KINDS and size.isdigit():
                name = f"{_DTYPE_KINDS[kind]}{int(size) * 8}DType"
            if name is not None:
                found.add(f"numpy.dtypes.{name}")
    return found


def _stubs(root):
    """Every stand-in the pickle built, outermost first (bounded: a pickle may hold millions of values)."""
    pending, walked = [root], 0
    while pending and walked < _MAX_WALKED:
        value = pending.pop()
        walked += 1
        if isinstance(value, _Stub):
            yield value
            pending += value.parts
        elif isinstance(value, dict):
            pending += list(value.keys()) + list(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            pending += list(value)


def _holders(root, refused: set) -> Dict[str, List[str]]:
    """For each refused global, the key paths of the values built from it (outermost first)."""
    found: Dict[str, List[str]] = {}
    pending: List[Tuple[object, str, int]] = [(root, "", 0)]
    walked = 0
    while pending and walked < _MAX_WALKED:
        value, where, depth = pending.pop(0)
        walked += 1
        if isinstance(value, _Stub):
            if value.global_name in refused:
                paths = found.setdefault(value.global_name, [])
                if where not in paths:
                    paths.append(where)
                continue  # what it holds is its business: the key that holds it is what to change
            children = list(enumerate(value.parts))
            # A container rebuilt by an allowed global (`OrderedDict`) keeps its keys.
            children = [(key, part) for _, part in children for key, part in (part.items() if isinstance(part, dict) else [(None, part)])]
        elif isinstance(value, dict):
            children = list(value.items())
        elif isinstance(value, (list, tuple, set, frozenset)):
            children = list(enumerate(value))
        else:
            continue
        if depth >= _MAX_DEPTH:
            continue
        for key, child in children:
            step = "" if key is None else f"[{key!r}]" if isinstance(key, (str, int)) else "[...]"
            pending.append((child, where + step.replace("'", '"'), depth + 1))
    return found


def _allowed_globals() -> set:
    """The globals torch's weights-only unpickler accepts: its own list and what `add_safe_globals` added."""
    from torch import _weights_only_unpickler as unpickler

    return set(unpickler._get_allowed_globals()) | set(unpickler._get_user_allowed_globals())


def _refusal(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines()]
    return next((line for line in lines if "Unsupported global" in line or "Unsupported operand" in line), lines[0] if lines else type(error).__name__)


def _first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__
