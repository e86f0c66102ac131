from typing import Optional

import libcst as cst

from torchlint.finding import Fix
from torchlint.rules.loss._activations import FUNCTION, METHOD, MODULE, SOFTMAX, ActivationBeforeLoss, Trace
from torchlint.rules.triggers import fragments, project_imports, words

# softmax spelled so that renaming one name gives its log version: F.softmax, x.softmax, nn.Softmax(dim)(x)
_LOG_VERSIONS = {"softmax": "log_softmax", "Softmax": "LogSoftmax"}


class SoftmaxIntoNllLoss(ActivationBeforeLoss):
    """
    ## What it does
    Flags `nn.NLLLoss` (or a criterion variable bound to one) and `F.nll_loss` called
    on a `softmax` result (not `log_softmax`): directly, through a variable assigned
    in the same function, or as the output of a model of the same module whose
    `forward` returns a softmax result or that is an `nn.Sequential` ending in
    `nn.Softmax`.

    Not flagged: `log_softmax` inputs, the correct pairing.

    ## Why is this bad?
    `nll_loss` does not take a logarithm: it returns minus the input at the target
    class. Given log-probabilities that is the cross-entropy; given probabilities it
    is -p[target], a number between -1 and 0. Nothing fails, but the model is
    trained on a different objective, whose gradient does not grow as the predicted
    probability of the right class falls towards 0.

    ## Fix safety
    Unsafe: the fix turns the softmax into `log_softmax` (`F.softmax` ->
    `F.log_softmax`, `x.softmax(dim)` -> `x.log_softmax(dim)`,
    `nn.Softmax(dim)(x)` -> `nn.LogSoftmax(dim)(x)`), which changes the loss values.
    It is offered only when the call sits in the loss's argument or behind variables
    used nowhere else; a softmax inside a model is left for you to change.
    """

    code = "TL403"
    name = "softmax-into-nll-loss"
    # A flagged call is the loss (qualified name or the constructor a criterion came from), so its last part is
    # written; the softmax it is fed is written here or in a project file this one imports.
    triggers = words("nll_loss", "NLLLoss") & (fragments("softmax") | project_imports())
    fix_safety = "unsafe"
    loss_modules = frozenset({"torch.nn.NLLLoss", "torch.nn.modules.loss.NLLLoss"})
    loss_functions = frozenset({"torch.nn.functional.nll_loss"})
    message = (
        "nll_loss expects log-probabilities: fed softmax probabilities it returns -p[target] (between -1 and 0) "
        "instead of the cross-entropy -log p[target], and trains silently on that; use `log_softmax`"
    )
    messages = {SOFTMAX: message}
    example = """
    import torch.nn.functional as F

    def training_step(model, images, labels):
        return F.nll_loss(F.softmax(model(images), dim=1), labels)  # expect: TL403:12
    """
    use_instead = """
    import torch.nn.functional as F

    def training_step(model, images, labels):
        return F.nll_loss(F.log_softmax(model(images), dim=1), labels)
    """

    def fix(self, trace: Trace) -> Optional[Fix]:
        if trace.form not in (FUNCTION, METHOD, MODULE):
            return None  # a module stored in a variable may be used elsewhere
        func = trace.call.func
        if trace.form == MODULE:  # nn.Softmax(dim=1)(x): rename the module class
            func = func.func
        if isinstance(func, cst.Attribute) and func.attr.value in _LOG_VERSIONS:
            return Fix.unsafe("Use log_softmax", self.ctx.replace(func.attr, _LOG_VERSIONS[func.attr.value]))
        return None
