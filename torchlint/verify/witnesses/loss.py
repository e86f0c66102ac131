"""Loss witnesses (TL4xx): a probability fed where logits or log-probabilities belong.

Confident, correct predictions expose the problem exactly: the loss cannot fall
below a floor, and its gradients shrink.
"""

from __future__ import annotations

import libcst as cst

from torchlint.rules.loss.activation_into_wrong_loss import MESSAGES
from torchlint.verify.witness import FROM_FINDING, Code, witness

_SOFTMAXES = {
    "torch.softmax": "torch.softmax(logits, dim=1)",
    "torch.nn.functional.softmax": "torch.nn.functional.softmax(logits, dim=1)",
    "torch.log_softmax": "torch.log_softmax(logits, dim=1)",
    "torch.nn.functional.log_softmax": "torch.nn.functional.log_softmax(logits, dim=1)",
}


@witness(
    "TL401",
    """
    import math
    import torch

    torch.manual_seed(0)
    C = $classes
    target = torch.arange(8) % C
    criterion = $criterion
    shown = $shown


    def best_loss(wrapped):
        # The lowest loss confident, right predictions reach (over growing confidence).
        losses = []
        for scale in (1.0, 2.0, 5.0, 10.0, 20.0):
            logits = torch.full((8, C), -scale)
            logits[torch.arange(8), target] = scale
            losses.append(float(criterion($wrap if wrapped else logits, target)))
        return min(losses)


    def gradient_norm(wrapped):
        logits = (torch.randn(8, C, generator=torch.Generator().manual_seed(1)) * 3).requires_grad_()
        criterion($wrap if wrapped else logits, target).backward()
        return float(logits.grad.norm())


    wrapped, raw = best_loss(True), best_loss(False)
    ratio = gradient_norm(False) / gradient_norm(True)
    if $kind == "log_softmax":
        if math.isclose(wrapped, raw, rel_tol=1e-5, abs_tol=1e-6) and math.isclose(ratio, 1.0, rel_tol=1e-4):
            confirmed(f"`{shown}` into cross-entropy: the same loss ({wrapped:.6f}) and gradients as the logits: the second log_softmax is redundant work")
        not_reproduced(f"`{shown}` into cross-entropy: loss {wrapped:.6f} vs {raw:.6f} on logits, gradient ratio {ratio:.4f}")
    floor = math.log(C - 1 + math.e) - 1
    if wrapped > raw + 1e-3 and ratio > 1:
        confirmed(f"{C} classes: the loss of `{shown}` never gets below {wrapped:.4f} (logits reach {raw:.6f}; floor without smoothing log(C-1+e)-1 = {floor:.4f}); gradients {ratio:.1f}x smaller")
    not_reproduced(f"best loss of `{shown}` {wrapped:.4f}, of the logits {raw:.4f}; gradient ratio {ratio:.2f}")
    """,
    classes=10,
    criterion=Code("torch.nn.CrossEntropyLoss()"),
    wrap=Code("torch.softmax(logits, dim=1)"),
    shown="torch.softmax(logits, dim=1)",
    kind="softmax",
)
def softmax_before_cross_entropy(site, entry):
    return _probability_input(site, entry, "torch.nn.CrossEntropyLoss", "torch.nn.functional.cross_entropy")


def _probability_input(site, entry, module, function):
    """Witness with the file's softmax variant and literal criterion arguments, when it can see them."""
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None or not call.args:
        return entry.canonical("the flagged code is not a loss call", site.device)
    first = call.args[0].value
    wrap = None
    if isinstance(first, cst.Call):
        name = site.qualified_name(first.func)
        if name in _SOFTMAXES:
            wrap = _SOFTMAXES[name]
        elif isinstance(first.func, cst.Attribute) and first.func.attr.value in ("softmax", "log_softmax"):
            wrap = f"logits.{first.func.attr.value}(dim=1)"
    criterion = _criterion(site, call, module, function)
    if wrap is None:
        return entry.canonical("the softmax is computed elsewhere; the canonical one is used", site.device, criterion=Code(criterion))
    kind = "log_softmax" if "log_softmax" in wrap else "softmax"
    return entry.witness(FROM_FINDING, "", site.device, criterion=Code(criterion), wrap=Code(wrap), shown=wrap, kind=kind)


def _criterion(site, call, module, function):
    name = site.qualified_name(call.func)
    if name == function:
        return function
    constructor = call.func.func if isinstance(call.func, cst.Call) else None
    if constructor is None:
        for value in reversed(site.ctx.assigned_values(call.func, site.stack(call.func))):
            if isinstance(value, cst.Call):
                constructor = value
                break
    if isinstance(constructor, cst.Call) and site.qualified_name(constructor.func) == module:
        kept, _ = site.literal_arguments(constructor)
        if kept is not None:
            return f"{module}({', '.join(kept)})"
    return f"{module}()"


@witness(
    "TL402",
    """
    import math
    import torch

    logits = torch.full((8,), 10.0)  # confident and right
    target = torch.ones(8)
    criterion = $criterion
    wrapped = float(criterion(torch.sigmoid(logits), target))
    raw = float(criterion(logits, target))
    floor = math.log(1 + math.exp(-1))
    if wrapped >= floor - 1e-4 and raw < floor:
        confirmed(f"confident right predictions: loss of sigmoid(logits) = {wrapped:.4f} >= floor log(1+e^-1) = {floor:.4f} (logits: {raw:.6f})")
    not_reproduced(f"loss of sigmoid(logits) = {wrapped:.4f}, of logits {raw:.4f}")
    """,
    criterion=Code("torch.nn.BCEWithLogitsLoss()"),
)
def sigmoid_before_bce_with_logits(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None:
        return entry.canonical("the flagged code is not a loss call", site.device)
    criterion = _criterion(site, call, "torch.nn.BCEWithLogitsLoss", "torch.nn.functional.binary_cross_entropy_with_logits")
    return entry.canonical("criterion taken from the file", site.device, criterion=Code(criterion))


@witness(
    "TL403",
    """
    import torch

    C = 10
    target = torch.arange(8) % C
    logits = torch.full((8, C), -10.0)
    logits[torch.arange(8), target] = 10.0  # confident and right
    criterion = $criterion
    wrong = float(criterion(torch.softmax(logits, dim=1), target))
    right = float(criterion(torch.log_softmax(logits, dim=1), target))
    if wrong < 0:
        confirmed(f"confident right predictions: NLL of softmax = {wrong:.4f} (negative: it is -p[target], bounded by -1), of log_softmax = {right:.6f}")
    not_reproduced(f"NLL of softmax = {wrong:.4f}, of log_softmax = {right:.4f}")
    """,
    criterion=Code("torch.nn.NLLLoss()"),
)
def softmax_into_nll_loss(site, entry):
    call = site.node if isinstance(site.node, cst.Call) else None
    if call is None:
        return entry.canonical("the flagged code is not a loss call", site.device)
    criterion = _criterion(site, call, "torch.nn.NLLLoss", "torch.nn.functional.nll_loss")
    return entry.canonical("criterion taken from the file", site.device, criterion=Code(criterion))


# TL404's pairings: the loss and activation the witness runs, by the finding's message.
_WRONG_PAIRINGS = {
    ("bce", "log_softmax"): ("torch.nn.BCELoss()", "torch.log_softmax(logits, dim=1)"),
    ("bce", "softmax"): ("torch.nn.BCELoss()", "torch.softmax(logits, dim=1)"),
    ("bce-with-logits", "softmax"): ("torch.nn.BCEWithLogitsLoss()", "torch.softmax(logits, dim=1)"),
    ("bce-with-logits", "log_softmax"): ("torch.nn.BCEWithLogitsLoss()", "torch.log_softmax(logits, dim=1)"),
    ("cross-entropy", "sigmoid"): ("torch.nn.CrossEntropyLoss()", "torch.sigmoid(logits)"),
}


@witness(
    "TL404",
    """
    import torch

    C = 5
    criterion = $criterion
    shown = $shown
    class_index = isinstance(criterion, torch.nn.CrossEntropyLoss)
    # Multi-label targets for the binary losses (two positives per sample), class indices for cross-entropy.
    labels = torch.arange(8) % C
    target = labels if class_index else torch.zeros(8, C).scatter_(1, labels[:, None], 1).scatter_(1, ((labels + 1) % C)[:, None], 1)
    positives = torch.zeros(8, C, dtype=torch.bool).scatter_(1, labels[:, None], True)
    if not class_index:
        positives |= target.bool()


    def best_loss(wrapped):
        # The lowest loss confident, right predictions reach (over growing confidence).
        losses = []
        for scale in (1.0, 2.0, 5.0, 10.0, 20.0):
            logits = torch.where(positives, scale, -scale)
            losses.append(float(criterion($wrap if wrapped else logits, target)))
        return min(losses)


    error = raised(lambda: best_loss(True))
    if error is not None:
        if "between 0 and 1" in str(error):
            confirmed(f"`{shown}` into {type(criterion).__name__}: " + describe(error))
        not_reproduced(f"`{shown}` into {type(criterion).__name__}: " + describe(error))
    wrapped = best_loss(True)
    reference = torch.nn.BCEWithLogitsLoss() if not class_index else criterion
    raw = float(min(reference(torch.where(positives, s, -s), target) for s in (1.0, 2.0, 5.0, 10.0, 20.0)))
    if wrapped > raw + 1e-2:
        confirmed(f"{C} classes, confident right predictions: the loss of `{shown}` into {type(criterion).__name__} never gets below {wrapped:.4f}, silently (the logits into the right loss reach {raw:.6f})")
    not_reproduced(f"best loss of `{shown}` {wrapped:.4f}; of the logits {raw:.4f}")
    """,
    criterion=Code("torch.nn.BCELoss()"),
    wrap=Code("torch.softmax(logits, dim=1)"),
    shown="torch.softmax(logits, dim=1)",
)
def activation_into_wrong_loss(site, entry):
    pairing = next((key for key, text in MESSAGES.items() if text == site.finding.message), None)
    if pairing is None:
        return entry.canonical("the finding's message names no pairing the witness knows", site.device)
    criterion, wrap = _WRONG_PAIRINGS[pairing]
    return entry.witness(FROM_FINDING, "the file's pairing on stand-in logits", site.device, criterion=Code(criterion), wrap=Code(wrap), shown=wrap)
