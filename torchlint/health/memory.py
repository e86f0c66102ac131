"""Memory of one training step, measured on the live objects: `torchlint doctor --memory`.

`measure(model, loader, criterion, optimizer, autocast)` runs the step the health check
runs (forward, loss, backward) on the loader's first batch and on its first half and
quarter, and counts bytes of tensor storage:

- parameters, buffers and gradients: the storages themselves, each shared storage once;
- activations: the storages autograd saves for backward (`saved_tensors_hooks`), less
  the parameters, buffers and the batch, which are counted on their own lines;
- the step's peak: every storage an operation allocates is counted from its creation to
  its release (a dispatch mode sees each operation's outputs, a finalizer each release);
  on a CUDA device `torch.cuda.max_memory_allocated()` is read instead;
- optimizer state: one `step()` of a copy of the optimizer on stand-ins of the
  parameters on the meta device (no memory, the optimizer's own code decides the
  layout), counted the same way, which also gives the step's temporaries; an optimizer
  whose step cannot run on meta tensors steps a copy of the parameters on their device.

The peak of a step is the larger of the backward's (parameters, buffers, optimizer state,
the batch and what the forward and backward allocate) and the optimizer step's
(parameters, buffers, gradients, the batch, the state and the step's temporaries).
Batch sizes other than the measured ones are a straight line through the two largest
measured sizes; the third checks that the line holds. Nothing is left changed: the
model's gradients, buffers and mode and the RNG are restored, and the optimizer itself
never steps.
"""

from __future__ import annotations

import copy
import weakref
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from torchlint.health.checks import Snapshot, first_batch, forward, split_batch, stand_in_loss, tensors_in

# The line through two measured sizes "holds" at the third when it predicts it this closely.
LINEARITY_TOLERANCE = 0.05
# Below this many bytes a miss of the line is noise (allocator rounding, a scalar), not a curve.
LINEARITY_SLACK = 64 * 1024


@dataclass(frozen=True)
class StepBytes:
    """What one forward and backward at one batch size held, in bytes."""

    batch_size: int
    batch: int
    activations: int
    # The most bytes allocated at once above what was live before the step (activations, gradients, temporaries).
    allocated_peak: int
    # The bytes allocated after each operation of the step: the same operations at another batch size line up.
    trace: Tuple[int, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Line:
    """bytes = fixed + per_sample * batch size."""

    fixed: float
    per_sample: float

    @classmethod
    def through(cls, small: Tuple[int, int], large: Tuple[int, int]) -> "Line":
        (x0, y0), (x1, y1) = small, large
        if x1 == x0:
            return cls(0.0, y1 / x1)
        slope = (y1 - y0) / (x1 - x0)
        return cls(y1 - slope * x1, slope)

    def at(self, batch_size: int) -> int:
        return max(0, round(self.fixed + self.per_sample * batch_size))


def upper_envelope(lines: Iterable[Line]) -> List[Line]:
    """The lines that are the highest at some batch size of 1 or more; the others never set a maximum.

    Taken steepest first, a line falls behind every line kept before it as the batch grows, so it
    is the highest somewhere only if it is already the highest at batch size 1.
    """
    kept: List[Line] = []
    highest_at_one = float("-inf")
    for line in sorted(set(lines), key=lambda line: (-line.per_sample, -line.fixed)):
        if line.fixed + line.per_sample > highest_at_one:
            kept.append(line)
            highest_at_one = line.fixed + line.per_sample
    return kept


@dataclass(frozen=True)
class Peak:
    bytes: int
    phase: str  # "backward" or "optimizer step"


@dataclass
class MemoryReport:
    """Bytes of one training step; `peak(batch_size)` and the parts' methods project it to another batch size."""

    device: str
    dtypes: str
    autocast: Optional[str]
    parameters: int
    buffers: int
    gradients: int
    optimizer: Optional[str]
    optimizer_state: int
    # The most bytes the optimizer step holds at once above the parameters and gradients (state and temporaries).
    optimizer_step_peak: int
    optimizer_how: str
    # Measured sizes, the loader's first.
    steps: List[StepBytes]
    peak_how: str
    notes: List[str] = field(default_factory=list)
    _envelopes: Dict[tuple, List[Line]] = field(default_factory=dict, repr=False)

    @property
    def batch_size(self) -> int:
        return self.steps[0].batch_size

    def activation_line(self) -> Line:
        return self._line("activations")

    def _line(self, attribute: str) -> Line:
        points = sorted((step.batch_size, getattr(step, attribute)) for step in self.steps)
        if len(points) == 1:  # one size: proportional to the batch
            return Line(0.0, points[0][1] / points[0][0])
        return Line.through(points[-2], points[-1])

    def _value(self, attribute: str, batch_size: int) -> int:
        for step in self.steps:
            if step.batch_size == batch_size:
                return getattr(step, attribute)
        if attribute == "allocated_peak":
            return self._allocated_peak(batch_size)
        return self._line(attribute).at(batch_size)

    def _allocated_peak(self, batch_size: int) -> int:
        """The step's allocation peak at another batch size: the highest of the lines that each operation's bytes follow.

        The moment of the peak moves with the batch (at a small batch the gradients at the end of
        the backward, at a large one the activations at its start), so a line through the measured
        peaks would miss it; each moment of the step is a line of its own, through the two largest sizes.
        """
        steps = sorted(self.steps, key=lambda step: step.batch_size)[-2:]
        if len(steps) == 2 and steps[0].trace and len(steps[0].trace) == len(steps[1].trace):
            key = (steps[0].batch_size, steps[1].batch_size)
            if key not in self._envelopes:
                small, large = steps
                self._envelopes[key] = upper_envelope(
                    Line.through((small.batch_size, before), (large.batch_size, after))
                    for before, after in zip(small.trace, large.trace))
            # What the CUDA allocator holds beyond the tensors (rounding, library workspaces); none on the CPU.
            overhead = steps[1].allocated_peak - max(steps[1].trace)
            return overhead + max(line.at(batch_size) for line in self._envelopes[key])
        if len(steps) == 2:  # the operations differ between the sizes: the line through the peaks
            small, large = steps
            return Line.through((small.batch_size, small.allocated_peak), (large.batch_size, large.allocated_peak)).at(batch_size)
        return self._line("allocated_peak").at(batch_size)

    def activations(self, batch_size: int) -> int:
        return self._value("activations", batch_size)

    def batch(self, batch_size: int) -> int:
        return self._value("batch", batch_size)

    def peak(self, batch_size: int) -> Peak:
        resident = self.parameters + self.buffers + self.batch(batch_size)
        backward = resident + self.optimizer_state + self._value("allocated_peak", batch_size)
        optimizer_step = resident + self.gradients + self.optimizer_step_peak
        return Peak(backward, "backward") if backward >= optimizer_step else Peak(optimizer_step, "optimizer step")

    def linearity(self) -> Optional[str]:
        """Why the line does not hold at the third measured size; None when it holds or could not be checked."""
        if len(self.steps) < 3:
            return None
        smallest = min(self.steps, key=lambda step: step.batch_size)
        for attribute, what in (("activations", "activations"), ("allocated_peak", "the step's allocations")):
            points = sorted((step.batch_size, getattr(step, attribute)) for step in self.steps)
            if attribute == "activations":
                predicted = Line.through(points[-2], points[-1]).at(smallest.batch_size)
            else:
                predicted = self._allocated_peak(smallest.batch_size)
            measured = points[0][1]
            if abs(predicted - measured) > max(LINEARITY_SLACK, LINEARITY_TOLERANCE * measured):
                sizes = ", ".join(f"{size}: {format_bytes(value)}" for size, value in points)
                return (f"{what} are not linear in the batch size (batch {sizes}; the two largest "
                        f"predict {format_bytes(predicted)} at {smallest.batch_size})")
        return None

    def linearity_checked(self) -> bool:
        return len(self.steps) >= 3

    def largest_batch_within(self, budget: int) -> Optional[int]:
        """The largest batch size whose projected peak fits in `budget` bytes; None when not even 1 does."""
        if self.peak(1).bytes > budget:
            return None
        low, high = 1, 2
        while self.peak(high).bytes <= budget and high < 2 ** 40:
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self.peak(middle).bytes <= budget else (low, middle)
        return low

    def as_json(self, batch_size: Optional[int] = None) -> dict:
        size = batch_size or self.batch_size
        peak = self.peak(size)
        return {
            "device": self.device, "dtypes": self.dtypes, "autocast": self.autocast,
            "measured_batch_size": self.batch_size, "batch_size": size,
            "parameters": self.parameters, "buffers": self.buffers, "gradients": self.gradients,
            "optimizer": self.optimizer, "optimizer_state": self.optimizer_state,
            "batch": self.batch(size), "activations": self.activations(size),
            "peak": peak.bytes, "peak_phase": peak.phase,
            "measured": {
                step.batch_size: {"batch": step.batch, "activations": step.activations, "allocated_peak": step.allocated_peak}
                for step in self.steps
            },
            "linear": None if not self.linearity_checked() else self.linearity() is None,
        }


class MeasurementFailed(Exception):
    """The step could not be measured; the health check's findings say why."""


def measure(model, loader, criterion=None, optimizer=None, autocast=None) -> MemoryReport:
    """Bytes of one training step at the loader's batch size, and at its half and quarter for the projection.

    `autocast` is an `Autocast` (the dtype the factory's forward runs in) or None.
    """
    import torch

    try:
        batch = first_batch(loader)
    except Exception as error:
        raise MeasurementFailed(f"reading the first batch fails ({type(error).__name__})") from None
    batch_size = _batch_size(batch, loader)
    parameters = list(model.parameters())
    device = parameters[0].device if parameters else torch.device("cpu")
    resident = _storage_keys(list(model.parameters()) + list(model.buffers()))
    snapshot = Snapshot(model)
    steps: List[StepBytes] = []
    with_gradient: Dict[int, object] = {}
    try:
        with torch.random.fork_rng(devices=[]):
            model.train()
            for size in _sizes(batch_size):
                try:
                    step, grads = _measure_step(model, criterion, _sliced(batch, size, batch_size), size, resident, autocast, device)
                except Exception as error:
                    if not steps:  # the loader's own batch: the health check reports the failure
                        raise MeasurementFailed(f"the step fails ({type(error).__name__})") from None
                    break  # a smaller batch that the model refuses (batch norm on one sample): fewer sizes
                if not steps:
                    with_gradient = grads
                steps.append(step)
    finally:
        snapshot.restore()
    gradients = _bytes_of(with_gradient.values())
    if optimizer is None:
        state, step_peak, how = 0, 0, "no optimizer returned by the factory"
    else:
        state, step_peak, how = _optimizer_bytes(optimizer, with_gradient)
    report = MemoryReport(
        device=str(device), dtypes=_dtypes(parameters), autocast=autocast.describe(device) if autocast else None,
        parameters=_bytes_of(parameters), buffers=_bytes_of(model.buffers()), gradients=gradients,
        optimizer=type(optimizer).__name__ if optimizer is not None else None, optimizer_state=state,
        optimizer_step_peak=step_peak, optimizer_how=how, steps=steps,
        peak_how="torch.cuda.max_memory_allocated()" if device.type == "cuda" else "allocations tracked per operation",
    )
    if autocast is not None and autocast.device_type not in ("", device.type):
        report.notes.append(f"the factory's autocast is for {autocast.device_type}; it was measured as {device.type} "
                            f"autocast in {autocast.dtype_name}, whose op lists differ a little")
    return report


@dataclass(frozen=True)
class Autocast:
    """The mixed precision the factory's objects ask for: a `torch.autocast`, a dtype or a GradScaler."""

    device_type: str
    dtype_name: str

    @classmethod
    def from_factory(cls, value, scaler) -> Optional["Autocast"]:
        import torch

        if isinstance(value, torch.autocast):
            return cls(value.device, str(value.fast_dtype).replace("torch.", "")) if value._enabled else None
        if isinstance(value, torch.dtype):
            return cls("", str(value).replace("torch.", ""))
        if scaler is not None and getattr(scaler, "is_enabled", lambda: False)():
            # A GradScaler is for float16 autocast (bfloat16 needs no scaling).
            return cls(getattr(scaler, "_device", "cuda"), "float16")
        return None

    def context(self, device):
        import torch

        return torch.autocast(device_type=device.type, dtype=getattr(torch, self.dtype_name))

    def describe(self, device) -> str:
        return f"{self.dtype_name} on {device.type}"


def _batch_size(batch, loader) -> int:
    """The size of dim 0: the loader's `batch_size` when a tensor of the batch has it, else the first tensor's."""
    leading = [tensor.shape[0] for tensor in tensors_in(batch) if tensor.dim() > 0]
    if not leading:
        raise MeasurementFailed("the batch holds no tensor with a batch dimension")
    declared = getattr(loader, "batch_size", None)
    return declared if isinstance(declared, int) and declared in leading else leading[0]


def _sizes(batch_size: int) -> List[int]:
    sizes = []
    for size in (batch_size, batch_size // 2, batch_size // 4):
        if size >= 1 and size not in sizes:
            sizes.append(size)
    return sizes


def _sliced(batch, size: int, batch_size: int):
    """The batch's first `size` samples: every tensor whose dim 0 is the batch size is cut there."""
    import torch

    if size == batch_size:
        return batch
    if isinstance(batch, torch.Tensor):
        return batch[:size] if batch.dim() > 0 and batch.shape[0] == batch_size else batch
    if isinstance(batch, dict):
        return {key: _sliced(value, size, batch_size) for key, value in batch.items()}
    if isinstance(batch, (tuple, list)):
        return type(batch)(_sliced(value, size, batch_size) for value in batch)
    return batch


def _measure_step(model, criterion, batch, size: int, resident, autocast, device):
    """(StepBytes, {id(parameter): its gradient}) for one forward, loss and backward."""
    import contextlib

    import torch

    inputs, labels = split_batch(batch)
    excluded = resident | _storage_keys(tensors_in(batch))
    saved: Dict[tuple, int] = {}

    def pack(tensor):
        storage = _storage(tensor)
        if storage is not None and _key(storage) not in excluded:
            saved[_key(storage)] = storage.nbytes()
        return tensor

    for parameter in model.parameters():
        parameter.grad = None
    # Tracked per operation everywhere, for the trace; on CUDA the allocator's peak is the one measured.
    tracked = _allocations()
    allocator = _CudaPeak(device) if device.type == "cuda" else contextlib.nullcontext()
    precision = autocast.context(device) if autocast else contextlib.nullcontext()
    with allocator, tracked:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), precision:
            output = forward(model, inputs)
            loss = _loss(criterion, output, labels)
        loss.backward()
        del output, loss
    grads = {id(parameter): parameter.grad for parameter in model.parameters() if parameter.grad is not None}
    batch_bytes = sum(tensor.nbytes for tensor in tensors_in(batch))
    peak = allocator.peak if device.type == "cuda" else tracked.peak
    return StepBytes(size, batch_bytes, sum(saved.values()), peak, tuple(tracked.trace)), grads


def _loss(criterion, output, labels):
    import torch

    if criterion is not None and labels is not None and isinstance(output, torch.Tensor):
        loss = criterion(output, labels)
        return loss.mean() if loss.dim() > 0 else loss
    if isinstance(output, torch.Tensor):
        return stand_in_loss(output)
    # A tuple or dict of outputs (language models): every floating output that has a graph.
    outputs = [tensor for tensor in tensors_in(output) if tensor.is_floating_point() and tensor.requires_grad]
    if not outputs:
        raise MeasurementFailed("the forward returns no tensor with a graph")
    return sum(stand_in_loss(tensor) for tensor in outputs)


def _optimizer_bytes(optimizer, with_gradient) -> Tuple[int, int, str]:
    """(state bytes after one step, the step's peak above parameters and gradients, how it was measured)."""
    import torch

    stand_in = {id(parameter): torch.empty_like(parameter, device="meta") for parameter in _optimized(optimizer)}
    for key, grad in with_gradient.items():
        if key in stand_in:
            stand_in[key].grad = torch.empty_like(grad, device="meta")
    try:
        state, peak = _step_copy(optimizer, stand_in, on_meta=True)
        return state, peak, "one step of a copy on meta-device stand-ins"
    except Exception:  # an optimizer whose step needs real values (`.item()`, a kernel without a meta version)
        del stand_in
    with torch.no_grad():
        stand_in = {id(parameter): parameter.detach().clone() for parameter in _optimized(optimizer)}
        for key, grad in with_gradient.items():
            if key in stand_in:
                stand_in[key].grad = grad.detach().clone()
    state, peak = _step_copy(optimizer, stand_in, on_meta=False)
    return state, peak, "one step of a copy of the parameters"


def _optimized(optimizer):
    return [parameter for group in optimizer.param_groups for parameter in group["params"]]


def _step_copy(optimizer, stand_in, on_meta: bool) -> Tuple[int, int]:
    """Step a copy of `optimizer` whose parameters are `stand_in[id(parameter)]`; the original is untouched."""
    import torch

    clone = copy.copy(optimizer)
    clone.state = defaultdict(dict)
    groups = []
    for group in optimizer.param_groups:
        copied = dict(group, params=[stand_in[id(parameter)] for parameter in group["params"]])
        on_cuda = all(parameter.device.type == "cuda" for parameter in group["params"])
        if on_meta and copied.get("fused"):
            copied["fused"] = False  # meta tensors have no fused kernels; the state is the same
        elif on_meta and on_cuda and copied.get("foreach") is None:
            copied["foreach"] = True  # what torch picks on CUDA, with its larger temporaries
        groups.append(copied)
    clone.param_groups = groups
    # Hooks belong to the original (a scheduler counts its steps); the class's `step`, not a wrapper bound to it.
    clone._optimizer_step_pre_hooks = OrderedDict()
    clone._optimizer_step_post_hooks = OrderedDict()
    device = next((parameter.device for parameter in _optimized(optimizer)), torch.device("cpu"))
    counting = _CudaPeak(device) if device.type == "cuda" and not on_meta else _allocations()
    with counting:
        type(optimizer).step(clone)
    state = _bytes_of(value for values in clone.state.values() for value in values.values() if isinstance(value, torch.Tensor))
    return state, counting.peak


class _CudaPeak:
    """The CUDA allocator's peak during the block, above what was allocated when it began."""

    def __init__(self, device):
        self.device = device
        self.peak = 0

    def __enter__(self):
        import torch

        torch.cuda.synchronize(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.before = torch.cuda.memory_allocated(self.device)
        return self

    def __exit__(self, *exc):
        import torch

        torch.cuda.synchronize(self.device)
        self.peak = torch.cuda.max_memory_allocated(self.device) - self.before
        return False


def _allocations():
    """A dispatch mode that counts the bytes of the storages operations create, from creation to release.

    A storage's Python object lives as long as the storage (torch preserves it), so a
    finalizer on it runs when the memory is released. Storages an operation receives
    (in-place results, views) are not new. Allocations inside a kernel that no tensor
    holds are not seen.
    """
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    class Allocations(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.live = 0
            self.peak = 0
            self.trace: List[int] = []
            self._counted: Dict[int, int] = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            received = {id(storage) for storage in map(_storage, tree_leaves((args, kwargs))) if storage is not None}
            for value in tree_leaves(result):
                storage = _storage(value)
                if storage is not None and id(storage) not in received and id(storage) not in self._counted:
                    self._count(storage)
            self.trace.append(self.live)
            return result

        def _count(self, storage) -> None:
            size = storage.nbytes()
            self._counted[id(storage)] = size
            self.live += size
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._released, id(storage))

        def _released(self, key: int) -> None:
            self.live -= self._counted.pop(key, 0)

    return Allocations()


def _storage(value):
    import torch

    if not isinstance(value, torch.Tensor) or value.is_sparse:
        return None
    try:
        return value.untyped_storage()
    except (RuntimeError, NotImplementedError):  # tensor subclasses without a storage
        return None


def _key(storage) -> tuple:
    return (str(storage.device), storage.data_ptr(), storage.nbytes())


def _storage_keys(tensors: Iterable) -> set:
    return {_key(storage) for storage in map(_storage, tensors) if storage is not None}


def _bytes_of(tensors: Iterable) -> int:
    """Bytes of the tensors' storages, each storage once (tied weights, views); meta storages by their size."""
    seen = {}
    for tensor in tensors:
        storage = _storage(tensor)
        if storage is not None:
            # Meta storages all sit at address 0: told apart by their Python object, which torch keeps per storage.
            key = id(storage) if storage.device.type == "meta" else _key(storage)
            seen[key] = storage.nbytes()
    return sum(seen.values())


def _dtypes(parameters) -> str:
    names = sorted({str(parameter.dtype).replace("torch.", "") for parameter in parameters})
    return ", ".join(names) or "no parameters"


def format_bytes(count: float) -> str:
    if abs(count) < 1024:
        return f"{count:,.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if abs(count) < 1024 or unit == "TiB":
            break
    return f"{count:,.1f} {unit}"
