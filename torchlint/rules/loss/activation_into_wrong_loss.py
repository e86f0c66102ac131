from typing import Optional

import libcst as cst

from torchlint.rules.loss._activations import LOG_SOFTMAX, SIGMOID, SOFTMAX, ActivationBeforeLoss
from torchlint.rules.triggers import fragments, project_imports, words

_BCE_MODULES = frozenset({"torch.nn.BCELoss", "torch.nn.modules.loss.BCELoss"})
_BCE_FUNCTIONS = frozenset({"torch.nn.functional.binary_cross_entropy", "torch.binary_cross_entropy"})
_LOGITS_MODULES = frozenset({"torch.nn.BCEWithLogitsLoss", "torch.nn.modules.loss.BCEWithLogitsLoss"})
_LOGITS_FUNCTIONS = frozenset({
    "torch.nn.functional.binary_cross_entropy_with_logits", "torch.binary_cross_entropy_with_logits",
})
_CE_MODULES = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"})
_CE_FUNCTIONS = frozenset({"torch.nn.functional.cross_entropy"})
_BCE, _BCE_WITH_LOGITS, _CROSS_ENTROPY = "bce", "bce-with-logits", "cross-entropy"
_FAMILIES = {
    **dict.fromkeys(_BCE_MODULES | _BCE_FUNCTIONS, _BCE),
    **dict.fromkeys(_LOGITS_MODULES | _LOGITS_FUNCTIONS, _BCE_WITH_LOGITS),
    **dict.fromkeys(_CE_MODULES | _CE_FUNCTIONS, _CROSS_ENTROPY),
}
# Softmax and log_softmax into cross-entropy are TL401's, sigmoid into BCE-with-logits TL402's; sigmoid into BCE is right.
MESSAGES = {
    (_BCE, LOG_SOFTMAX): (
        "log_softmax output into binary cross-entropy: its values are log-probabilities (<= 0), and BCELoss raises "
        "`RuntimeError: all elements of input should be between 0 and 1`; give BCELoss sigmoid probabilities, or "
        "the logits to `BCEWithLogitsLoss`"
    ),
    (_BCE, SOFTMAX): (
        "softmax output into binary cross-entropy: it runs silently, but with multi-label targets the classes share "
        "one unit of probability, so two positives can never both reach 1 and the loss keeps a floor, and with one "
        "class per sample it is a roundabout cross-entropy through probabilities; use sigmoid (or the logits with "
        "`BCEWithLogitsLoss`) for multi-label targets, the logits with `CrossEntropyLoss` for one class per sample"
    ),
    (_BCE_WITH_LOGITS, SOFTMAX): (
        "softmax output into BCE-with-logits, which applies sigmoid itself: probabilities in [0, 1] become "
        "sigmoid values in [0.5, 0.73], so it runs silently on a loss that cannot go below 0.313 for a positive "
        "target and 0.693 for a negative one; pass the logits"
    ),
    (_BCE_WITH_LOGITS, LOG_SOFTMAX): (
        "log_softmax output into BCE-with-logits, which applies sigmoid itself: log-probabilities (<= 0) become "
        "sigmoid values of at most 0.5, so it runs silently on a loss that cannot go below log(2) = 0.693 for a "
        "positive target; pass the logits"
    ),
    (_CROSS_ENTROPY, SIGMOID): (
        "sigmoid output into cross-entropy, which applies log_softmax itself: scores squashed into (0, 1) keep "
        "every class close, so the loss cannot go below log(C-1+e)-1 (0.905 for 5 classes) even for perfect "
        "predictions, silently; pass the logits"
    ),
}


class ActivationIntoWrongLoss(ActivationBeforeLoss):
    """
    ## What it does
    Flags an activation fed to a loss that does not expect it: `softmax` or
    `log_softmax` output into `nn.BCELoss` / `F.binary_cross_entropy` or
    `nn.BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits`, and `sigmoid`
    output into `nn.CrossEntropyLoss` / `F.cross_entropy`. The activation is found as
    TL401 finds it: in the loss's argument (also behind `.view(...)`-style
    reshapes), through a variable, or as the output of a model of the project whose
    `forward` returns it or that is an `nn.Sequential` ending in it; the loss may be
    a criterion variable.

    Not flagged: `BCELoss(sigmoid(x))` (the right pairing), logits into
    `BCEWithLogitsLoss` or `CrossEntropyLoss`, one column of a softmax
    (`F.binary_cross_entropy(probs[:, 1], y)`, a binary classifier with two
    outputs), and the pairings other rules report: softmax or log_softmax into
    cross-entropy (TL401), sigmoid into BCE-with-logits (TL402), softmax into NLL
    (TL403).

    ## Why is this bad?
    Observed on torch 2.13: `BCELoss(log_softmax(x))` raises `RuntimeError: all
    elements of input should be between 0 and 1`. The other pairings run silently
    on a distorted loss. Softmax into BCE makes the classes compete for one unit of
    probability, so multi-label targets cannot be fitted (two positives share at
    most 1). BCE-with-logits applies sigmoid to the probabilities again: the loss of
    a positive target cannot go below 0.313. Cross-entropy on sigmoid outputs
    cannot go below 0.905 for 5 classes, even for a perfect prediction, and its
    gradients are damped by the sigmoid's.

    ## Fix safety
    No fix: which activation the model should end in (sigmoid for multi-label,
    none for cross-entropy) depends on the task, and a model's output may be used
    elsewhere.
    """

    code = "TL404"
    name = "activation-into-wrong-loss"
    # A flagged call is one of the losses (qualified name or a criterion's constructor): its last part is written;
    # the activation is written here or in a project file this one imports.
    triggers = words(
        "binary_cross_entropy", "BCELoss", "binary_cross_entropy_with_logits", "BCEWithLogitsLoss",
        "cross_entropy", "CrossEntropyLoss",
    ) & (fragments("softmax", "sigmoid", "expit") | project_imports())
    loss_modules = _BCE_MODULES | _LOGITS_MODULES | _CE_MODULES
    loss_functions = _BCE_FUNCTIONS | _LOGITS_FUNCTIONS | _CE_FUNCTIONS
    message = MESSAGES[(_BCE, SOFTMAX)]
    example = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    bce = nn.BCELoss()

    def training_step(model, images, tags, labels):
        multi_label = bce(F.softmax(model(images), dim=1), tags)  # expect: TL404:19
        single_label = F.cross_entropy(torch.sigmoid(model(images)), labels)  # expect: TL404:20
        return multi_label + single_label
    """
    use_instead = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    bce = nn.BCELoss()

    def training_step(model, images, tags, labels):
        multi_label = bce(torch.sigmoid(model(images)), tags)
        single_label = F.cross_entropy(model(images), labels)
        return multi_label + single_label
    """

    def message_for(self, loss: cst.Call, kind: str) -> Optional[str]:
        return MESSAGES.get((_FAMILIES.get(self.loss_name(loss)), kind))
