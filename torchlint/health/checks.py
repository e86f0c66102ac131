"""The health check's findings: the static rules' questions asked of a live model, loader and criterion.

`check(model, loader, criterion=None, optimizer=None)` inspects the objects, then
runs one training step on the loader's first batch (forward, loss, backward; no
optimizer step) and returns `Finding`s with TL9xx codes, or the static rule's code
where the problem is the one that rule finds in source (TL203, TL306). The step
leaves the model as it was: its gradients, buffers, training mode and the RNG
state are restored.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set

from torchlint.finding import Finding, Location, documentation_url

ERROR, WARNING = "error", "warning"



@dataclass(frozen=True)
class Check:
    code: str
    name: str
    severity: str


CHECKS = {
    check.code: check
    for check in (
        Check("TL901", "batch-on-another-device", ERROR),
        Check("TL902", "mixed-parameter-dtypes", WARNING),
        Check("TL903", "float64-parameters", WARNING),
        Check("TL904", "float64-inputs", WARNING),
        Check("TL905", "first-step-fails", ERROR),
        Check("TL906", "parameters-without-gradient", WARNING),
        Check("TL907", "parameters-not-optimized", WARNING),
        Check("TL908", "pin-memory-without-accelerator", WARNING),
        Check("TL909", "more-workers-than-cores", WARNING),
        Check("TL910", "workers-not-persistent", WARNING),
        Check("TL911", "loss-reduction-sum", WARNING),
        Check("TL912", "negative-label-smoothing", ERROR),
        Check("TL913", "ignore-index-is-a-class", WARNING),
        Check("TL914", "bad-class-weights", ERROR),
        Check("TL915", "non-finite-loss", ERROR),
        Check("TL916", "warning-during-step", WARNING),
        Check("TL917", "memory-exceeds-target", ERROR),
        Check("TL918", "memory-not-linear-in-batch", WARNING),
        # Static rules whose problem the runtime check sees in the live objects.
        Check("TL203", "label-cast-to-float", ERROR),
        Check("TL306", "synchronous-dataloader", WARNING),
    )
}
# Losses whose target is a class index per sample (or class probabilities of the output's shape).
CLASS_INDEX_LOSSES = ("CrossEntropyLoss", "NLLLoss")
_LISTED = 3


def check_url(code: str) -> str:
    """The section of docs/health.md on a check: its heading, `` `TL901` batch-on-another-device``, as GitHub anchors it."""
    return documentation_url(f"health.md#{code.lower()}-{CHECKS[code].name}")


class Report:
    """Findings of one check, in the order they were found."""

    def __init__(self, source: str):
        self.source = source
        self.findings: List[Finding] = []

    def add(self, code: str, message: str, index: int = 1, **extra) -> None:
        check = CHECKS[code]
        url = check_url(code)
        self.findings.append(Finding(
            code, check.name, message, self.source, Location(index, 1), Location(index, 1),
            extra={"severity": check.severity, "url": url, **extra},
        ))


def severity(finding: Finding) -> str:
    return finding.extra.get("severity", ERROR)


def check(model, loader, criterion=None, optimizer=None, source: str = "health") -> List[Finding]:
    """Everything the health check finds; `source` is the name findings are reported under."""
    report = Report(source)
    parameters = list(model.named_parameters())
    _check_parameters(report, parameters)
    _check_loader(report, loader)
    if criterion is not None:
        _check_criterion(report, criterion)
    optimized = None if optimizer is None else {id(parameter) for group in optimizer.param_groups for parameter in group["params"]}
    without_gradient = _check_first_step(report, model, loader, criterion, parameters, optimized)
    if optimized is not None:
        _check_optimizer(report, parameters, optimized, without_gradient)
    return report.findings


# ---------------------------------------------------------------- the objects themselves


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(f"`{name}`" for name in items[:_LISTED])
    return shown + (f" and {len(items) - _LISTED} more" if len(items) > _LISTED else "")


def _check_parameters(report: Report, parameters) -> None:
    import torch

    by_dtype: Dict[object, List[int]] = {}
    for index, (_, parameter) in enumerate(parameters, start=1):
        if parameter.is_floating_point():
            by_dtype.setdefault(parameter.dtype, []).append(index)
    if len(by_dtype) > 1:
        counts = ", ".join(f"{len(indexes)} {str(dtype).replace('torch.', '')}" for dtype, indexes in by_dtype.items())
        rarest = min(by_dtype.values(), key=len)
        report.add("TL902", f"parameters of several floating dtypes ({counts}): a layer fed another dtype raises "
                            "`mat1 and mat2 must have the same dtype`; convert the model with one `.to(dtype)`", rarest[0])
    doubles = by_dtype.get(torch.float64, [])
    if doubles:
        names = [parameters[index - 1][0] for index in doubles]
        report.add("TL903", f"{len(doubles)} float64 parameter(s) ({_names(names)}): twice the memory of float32, "
                            "and a float32 input raises a dtype error; `model.float()` unless float64 is deliberate", doubles[0])


def _check_optimizer(report: Report, parameters, optimized: Set[int], without_gradient: Optional[Set[str]]) -> None:
    """TL907, for the parameters the step gave a gradient; those without one are in TL906's finding, which says both."""
    missing = [(index, name) for index, (name, parameter) in enumerate(parameters, start=1)
               if parameter.requires_grad and id(parameter) not in optimized
               and (without_gradient is None or name not in without_gradient)]
    if not missing:
        return
    # Without a backward (the step failed first) whether they get gradients is unknown.
    consequence = "they never change" if without_gradient is None else "they get gradients but never change"
    report.add("TL907", f"{len(missing)} trainable parameter(s) are not in the optimizer ({_names([n for _, n in missing])}): "
                        f"{consequence}", missing[0][0])


def _check_loader(report: Report, loader) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    if not isinstance(loader, DataLoader):
        return
    workers = loader.num_workers
    if workers == 0 and not isinstance(loader.dataset, TensorDataset):
        report.add("TL306", "DataLoader with `num_workers=0`: every batch is loaded in the training process and each "
                            "step waits for it; set `num_workers` > 0 to load batches in parallel")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if workers > cores:
        report.add("TL909", f"`num_workers={workers}` on {cores} available core(s): the workers compete for the cores "
                            f"(torch warns about this too); use at most {cores}")
    if workers > 0 and not loader.persistent_workers:
        report.add("TL910", f"{workers} worker process(es) started again every epoch (`persistent_workers=False`): "
                            "pass `persistent_workers=True` to keep them between epochs")
    if loader.pin_memory and not _accelerator_available():
        report.add("TL908", "`pin_memory=True` without an accelerator: torch warns at the first batch and pins nothing; "
                            "pass `pin_memory=torch.cuda.is_available()`")


def _accelerator_available() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return accelerator.is_available()
    return torch.cuda.is_available()


def _check_criterion(report: Report, criterion) -> None:
    kind = type(criterion).__name__
    reduction = getattr(criterion, "reduction", None)
    if reduction == "sum":
        report.add("TL911", f"{kind}(reduction='sum'): the loss and its gradients grow with the batch size (exactly N "
                            "times 'mean'), so the learning rate must change with it; use 'mean' unless intended")
    smoothing = getattr(criterion, "label_smoothing", 0.0)
    if isinstance(smoothing, float) and smoothing < 0:
        report.add("TL912", f"{kind}(label_smoothing={smoothing}): torch accepts a negative value silently (it rejects "
                            "only values above 1) and pushes the probabilities away from uniform; use a value in [0, 1]")
    weight = getattr(criterion, "weight", None)
    if weight is not None:
        negative = int((weight < 0).sum())
        if negative or not bool(weight.any()):
            what = f"{negative} negative class weight(s)" if negative else "class weights that are all zero"
            report.add("TL914", f"{kind} with {what}: the loss can fall below zero or become NaN "
                                "(torch checks only the weights' length); use positive weights")


# ---------------------------------------------------------------- one step on the first batch


def first_batch(loader):
    """The loader's first batch, leaving torch's RNG as it was (iterating draws the loader's base seed)."""
    import torch

    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        # The loader's own warnings (pin_memory, worker count) are reported by the loader checks.
        warnings.simplefilter("ignore")
        return next(iter(loader))


def _check_first_step(report: Report, model, loader, criterion, parameters, optimized) -> Optional[Set[str]]:
    """The step's findings; returns the trainable parameters that got no gradient, None when no backward ran."""
    import torch

    try:
        batch = first_batch(loader)
    except Exception as error:  # the loader's own failure is the finding
        report.add("TL905", f"reading the first batch fails: {describe(error)}")
        return None
    inputs, labels = split_batch(batch)
    model_devices = {parameter.device for _, parameter in parameters}
    batch_devices = {tensor.device for tensor in tensors_in(batch)}
    if model_devices and batch_devices and not batch_devices <= model_devices:
        report.add("TL901", f"the batch is on {_devices(batch_devices)}, the model on {_devices(model_devices)}: "
                            "the forward raises; move the batch with `.to(device)` in the loop")
        return None
    doubles = [tensor for tensor in tensors_in(inputs) if tensor.dtype == torch.float64]
    if doubles:
        report.add("TL904", f"the batch's inputs are float64 (shape {tuple(doubles[0].shape)}): twice the memory, and "
                            "float32 layers raise `mat1 and mat2 must have the same dtype`; convert them with `.float()` "
                            "(numpy arrays default to float64)")
    saved = Snapshot(model)
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.train()
            without_gradient = _step(report, model, inputs, labels, criterion, parameters, optimized)
        for message in _distinct(caught):
            report.add("TL916", f"torch warned during the first step: {message}")
    finally:
        saved.restore()
    return without_gradient


def forward(model, inputs):
    return model(*inputs) if isinstance(inputs, (tuple, list)) else model(inputs)


def stand_in_loss(output):
    """What the step backpropagates from without a criterion or labels: the sum of the output."""
    return output.float().sum()


def _step(report: Report, model, inputs, labels, criterion, parameters, optimized) -> Optional[Set[str]]:
    import torch

    try:
        output = forward(model, inputs)
    except Exception as error:  # what the training loop would hit first
        report.add("TL905", f"the model's forward fails on the first batch: {describe(error)}")
        return None
    if not isinstance(output, torch.Tensor):
        return None
    if criterion is None or labels is None:
        loss = stand_in_loss(output)
    else:
        _check_ignore_index(report, criterion, output)
        try:
            loss = criterion(output, labels)
        except Exception as error:
            _loss_failed(report, criterion, output, labels, error)
            return None
        if not bool(torch.isfinite(loss).all()):
            report.add("TL915", f"the loss of the first batch is {loss.detach().flatten()[0].item()}: "
                                f"{_non_finite_cause(criterion, labels)}")
            return None
        if loss.dim() > 0:
            loss = loss.mean()  # reduction='none': the loop reduces it before backward
    if not loss.requires_grad:
        report.add("TL905", "the loss does not require grad: backward raises `element 0 of tensors does not require "
                            "grad and does not have a grad_fn` (the forward ran under no_grad, or every parameter is frozen)")
        return None
    try:
        loss.backward()
    except Exception as error:
        report.add("TL905", f"backward fails on the first batch: {describe(error)}")
        return None
    missing = [(index, name, parameter) for index, (name, parameter) in enumerate(parameters, start=1)
               if parameter.requires_grad and parameter.grad is None]
    if missing:
        _report_without_gradient(report, missing, optimized)
    return {name for _, name, _ in missing}


def _report_without_gradient(report: Report, missing, optimized: Optional[Set[int]]) -> None:
    """TL906; for parameters that are in no parameter group either it says so too, in place of TL907's "they get gradients"."""
    message = (f"{len(missing)} trainable parameter(s) got no gradient from one backward "
               f"({_names([name for _, name, _ in missing])}): ")
    unoptimized = [name for _, name, parameter in missing if optimized is not None and id(parameter) not in optimized]
    if len(unoptimized) == len(missing):
        message += ("they are not used by the forward (or their output is detached), and they are not in the optimizer "
                    "either: nothing trains them; remove them, or use them in the forward and add them to the optimizer")
    else:
        message += "optimizers skip them silently; they are not used by the forward, or their output is detached"
        if unoptimized:
            message += f"; {len(unoptimized)} of them ({_names(unoptimized)}) are not in the optimizer either"
    report.add("TL906", message, missing[0][0])


def _loss_failed(report: Report, criterion, output, labels, error) -> None:
    kind = type(criterion).__name__
    index_targets = kind in CLASS_INDEX_LOSSES and labels.dim() == output.dim() - 1
    if index_targets and labels.is_floating_point():
        report.add("TL203", f"class labels are {labels.dtype} and {kind} raises `{describe(error)}`: keep them int64 "
                            "(float32 also merges ids above 2**24)")
    else:
        report.add("TL905", f"{kind} fails on the first batch (output {tuple(output.shape)} {output.dtype}, labels "
                            f"{tuple(labels.shape)} {labels.dtype}): {describe(error)}")


def _non_finite_cause(criterion, labels) -> str:
    ignore = getattr(criterion, "ignore_index", None)
    if ignore is not None and getattr(criterion, "reduction", "mean") == "mean" and bool((labels == ignore).all()):
        return f"every label equals ignore_index={ignore}, so the mean is over no sample"
    return "the first backward would fill the gradients with NaN"


def _check_ignore_index(report: Report, criterion, output) -> None:
    """An `ignore_index` that is one of the output's classes: that class never contributes to the loss."""
    ignore = getattr(criterion, "ignore_index", None)
    kind = type(criterion).__name__
    if kind in CLASS_INDEX_LOSSES and output.dim() >= 2 and isinstance(ignore, int) and 0 <= ignore < output.shape[1]:
        report.add("TL913", f"{kind}(ignore_index={ignore}) on a {output.shape[1]}-class output: class {ignore} is "
                            "dropped from the loss and never learned; use a value outside the classes (the default -100)")


# ---------------------------------------------------------------- helpers


class Snapshot:
    """What one step changes in a model: gradients, buffers (batch-norm statistics) and the training mode."""

    def __init__(self, model):
        self.model = model
        self.training = model.training
        self.grads = [(parameter, parameter.grad) for parameter in model.parameters()]
        self.buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]

    def restore(self) -> None:
        import torch

        with torch.no_grad():
            for buffer, saved in self.buffers:
                buffer.copy_(saved)
        for parameter, grad in self.grads:
            parameter.grad = grad
        self.model.train(self.training)


def split_batch(batch):
    """(inputs, labels): `(x, y)`, `(x1, x2, y)` and `{"input": x, "label": y}` batches; labels None when unknown."""
    if isinstance(batch, dict):
        inputs = next((batch[key] for key in ("input", "inputs", "x", "image", "images", "pixel_values") if key in batch), None)
        labels = next((batch[key] for key in ("label", "labels", "target", "targets", "y") if key in batch), None)
        return inputs, labels
    if isinstance(batch, (tuple, list)) and len(batch) >= 2:
        inputs = batch[0] if len(batch) == 2 else tuple(batch[:-1])
        return inputs, batch[-1]
    return batch, None


def tensors_in(value):
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


def _devices(devices) -> str:
    return " and ".join(sorted(str(device) for device in devices))


def describe(error: BaseException) -> str:
    first = (message_of(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {first[:200]}"


def message_of(error: BaseException) -> str:
    """`str(error)`, or a stand-in when the exception's own `__str__` raises (user code can define anything)."""
    try:
        return str(error)
    except Exception as failure:
        return f"<the message cannot be shown: its __str__ raised {type(failure).__name__}>"


def _distinct(caught) -> List[str]:
    seen = []
    for record in caught:
        text = " ".join(str(record.message).split())
        if text not in seen:
            seen.append(text)
    return seen
