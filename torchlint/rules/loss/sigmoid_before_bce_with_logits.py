from typing import Optional

from torchlint.finding import Fix
from torchlint.rules.loss._activations import SIGMOID, ActivationBeforeLoss, Trace
from torchlint.rules.triggers import fragments, project_imports, words


class SigmoidBeforeBceWithLogits(ActivationBeforeLoss):
    """
    ## What it does
    Flags `nn.BCEWithLogitsLoss` (or a criterion variable bound to one) and
    `F.binary_cross_entropy_with_logits` called on a sigmoid result
    (`torch.sigmoid`, `F.sigmoid`, `x.sigmoid()`, `nn.Sigmoid()(x)`): directly,
    through a variable assigned in the same function, or as the output of a model
    of the same module whose `forward` returns a sigmoid result or that is an
    `nn.Sequential` ending in `nn.Sigmoid`.

    Not flagged: `nn.BCELoss()(torch.sigmoid(x), y)`, the correct pairing.

    ## Why is this bad?
    `BCEWithLogitsLoss` applies the sigmoid itself, so a sigmoid output is squashed
    twice. Nothing fails: the model trains on a distorted loss whose value for a
    positive target can never go below log(1+e^-1) = 0.313 (observed on torch 2.13,
    with an input logit of 50), and whose gradients carry an extra sigmoid
    derivative of at most 1/4.

    ## Fix safety
    Unsafe: the fix passes the logits by dropping the sigmoid call, which changes
    the loss values and the training dynamics. It is offered only when the call
    sits in the loss's argument or behind variables used nowhere else; a sigmoid
    inside a model is left for you to move, since other code may rely on the model
    returning probabilities.
    """

    code = "TL402"
    name = "sigmoid-before-bce-with-logits"
    # A flagged call is the loss (qualified name or the constructor a criterion came from), so its last part is
    # written; the sigmoid it is fed is written here or in a project file this one imports.
    triggers = words("binary_cross_entropy_with_logits", "BCEWithLogitsLoss") & (fragments("sigmoid", "expit") | project_imports())
    fix_safety = "unsafe"
    loss_modules = frozenset({"torch.nn.BCEWithLogitsLoss", "torch.nn.modules.loss.BCEWithLogitsLoss"})
    loss_functions = frozenset({
        "torch.nn.functional.binary_cross_entropy_with_logits", "torch.binary_cross_entropy_with_logits",
    })
    message = (
        "BCE-with-logits applies sigmoid itself: a sigmoid output is squashed twice, so the loss of a positive target "
        "can never go below log(1+e^-1) = 0.313; pass the logits (or keep the sigmoid and use `BCELoss`)"
    )
    messages = {SIGMOID: message}
    example = """
    import torch
    import torch.nn as nn

    criterion = nn.BCEWithLogitsLoss()

    def training_step(model, images, targets):
        return criterion(torch.sigmoid(model(images)), targets)  # expect: TL402:12
    """
    use_instead = """
    import torch.nn as nn

    criterion = nn.BCEWithLogitsLoss()

    def training_step(model, images, targets):
        return criterion(model(images), targets)
    """

    def fix(self, trace: Trace) -> Optional[Fix]:
        return self.drop_activation(trace)
