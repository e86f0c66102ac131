import pkgutil
import sys
from functools import lru_cache
from typing import Dict, Optional

import libcst as cst

from torchlint import semantics
from torchlint.finding import Fix
from torchlint.rules.api._compat import in_compat_branch
from torchlint.rules.base import Rule
from torchlint.rules.triggers import words

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

MODELS = "torchvision.models."
# Keyword -> the keyword that replaced it.
RENAMED = {"pretrained": "weights", "pretrained_backbone": "weights_backbone"}
# Builder folders whose builders are named with the folder (`detection.fasterrcnn_resnet50_fpn`).
TASK_FOLDERS = ("detection", "segmentation", "video", "optical_flow", "quantization")
NOT_BUILDERS = frozenset({"get_model", "get_model_builder", "get_model_weights", "get_weight", "list_models"})
# torchvision 0.13, which brought `weights=`, needs torch 1.12: code for an older torch has an older torchvision.
WEIGHTS_SINCE_TORCH = (1, 12)


@lru_cache(maxsize=None)
def legacy_weights() -> Dict[str, Dict[str, str]]:
    """{"pretrained": {builder: weights member}, "pretrained_backbone": {...}} from torchlint/data/torchvision.toml."""
    data = pkgutil.get_data("torchlint", "data/torchvision.toml")
    return tomllib.loads(data.decode("utf-8"))


def builder_key(qualified: str) -> Optional[str]:
    """`resnet50` for `torchvision.models.resnet50` or `torchvision.models.resnet.resnet50`; None for non-builders."""
    if not qualified.startswith(MODELS):
        return None
    parts = qualified[len(MODELS):].split(".")
    leaf = parts[-1]
    if not leaf[:1].islower() or leaf in NOT_BUILDERS:
        return None
    return f"{parts[0]}.{leaf}" if parts[0] in TASK_FOLDERS and len(parts) > 1 else leaf


class TorchvisionPretrained(Rule):
    """
    ## What it does
    Flags `pretrained=` and `pretrained_backbone=` passed to torchvision model builders
    (`torchvision.models.resnet50(pretrained=True)`, `models.detection.fasterrcnn_resnet50_fpn(
    pretrained_backbone=False)`, `torchvision.models.get_model("resnet50", pretrained=True)`), also a builder
    chosen by name (`models.__dict__[args.arch](pretrained=True)`, `getattr(models, arch)(pretrained=True)`).
    Not `torch.hub.load` or other libraries' `pretrained=` arguments, and not in code for
    torch below 1.12 (`torch-version`, or the project's own torch requirement): torchvision
    0.13, which brought `weights=`, needs torch 1.12, so such code has a torchvision where
    `pretrained=` is the only way and `weights=` a `TypeError`. Nor in code chosen by the
    running version: either arm of a torch or torchvision version test
    (`if _TORCHVISION_LESS_THAN_0_13: ...(pretrained=True) else: ...(weights=...)`), or an
    `except ImportError:`/`AttributeError:` fallback, as TL601, TL602 and TL605 do.

    ## Why is this bad?
    torchvision deprecated them in 0.13: each call warns `UserWarning: The parameter
    'pretrained' is deprecated since 0.13 and may be removed in the future, please use
    'weights' instead.` (and a second warning naming the weights it loads), and a future
    release removes them (a `TypeError` then). (torchvision's own message; torchvision is
    not installed where torchlint's tests run.)

    ## Fix safety
    Safe for a literal `True` or `False` on a builder whose legacy weights are known
    (`torchlint/data/torchvision.toml`): `pretrained=True` becomes
    `weights="IMAGENET1K_V1"` (the weights `pretrained=True` loads, which for some models
    are not the newest `DEFAULT`), `pretrained=False` becomes `weights=None`. Not offered
    when the value is not a literal, the call already passes `weights=`, passes `**kwargs`,
    or the builder is unknown.
    """

    code = "TL608"
    name = "torchvision-pretrained"
    preview = (
        "In preview after held-out rounds 47-49 (docs/precision.md): 2 of 22 findings true at first sight. Nineteen "
        "were the builders of a project's own 2017 copy of torchvision, a git submodule put first on `sys.path`, "
        "whose `resnet101(fully_conv=True, pretrained=True, ...)` has no `weights=`; the rule leaves preview again "
        "when two rounds in a row read it at least 9 in 10 true."
    )
    about_the_source = True
    # A flagged builder resolves to a name under `torchvision.models`, so the file imports `torchvision` by name.
    triggers = words("torchvision")
    # Every name it acts on resolves under `torchvision.models`, or is the builtin `getattr` picking a builder by name.
    call_parts = frozenset({"torchvision", "getattr"})
    fix_safety = "safe"
    message = (
        "`pretrained=` is deprecated since torchvision 0.13 (it warns when called, and torchvision says it may be removed); "
        "pass `weights=` with the weights enum (or its name)"
    )
    example = """
    from torchvision import models

    model = models.resnet50(pretrained=True)  # expect: TL608:25
    """
    use_instead = """
    from torchvision import models

    model = models.resnet50(weights="IMAGENET1K_V1")
    """

    def visit_Call(self, node: cst.Call) -> None:
        if self.ctx.config.torch_version < WEIGHTS_SINCE_TORCH:
            return
        picked = self._picked_by_name(node.func)
        qualified = self.ctx.qualified_name(node.func) if picked is None else picked
        if qualified is None:
            return
        if picked is not None:
            key = None
        elif qualified == MODELS + "get_model":
            name = semantics.positional(node, 0) or semantics.keyword(node, "name")
            model = semantics.literal(name.value) if name is not None else None
            key = model if isinstance(model, str) else None
        else:
            key = builder_key(qualified)
            if key is None:
                return
        if in_compat_branch(self.ctx.stack, lambda expr: self.ctx.qualified_name(expr) is not None):
            return  # `if _TORCHVISION_LESS_THAN_0_13: ...(pretrained=True) else: ...(weights=...)`
        for old, new in RENAMED.items():
            arg = semantics.keyword(node, old)
            if arg is not None:
                message = (
                    f"`{old}=` is deprecated since torchvision 0.13 (it warns when called, and torchvision says it may be removed); "
                    f"pass `{new}=` instead"
                )
                self.report(arg, message, self._fix(node, arg, old, new, key))

    def _picked_by_name(self, func: cst.BaseExpression) -> Optional[str]:
        """`models.__dict__[arch]` or `getattr(models, arch)` of a torchvision builder module: a builder chosen by its
        name at run time (`models.__dict__[args.arch](pretrained=True)`), as the module's qualified name."""
        if type(func) is cst.Subscript and type(func.value) is cst.Attribute and func.value.attr.value == "__dict__":
            module = func.value.value
        elif (
            type(func) is cst.Call and type(func.func) is cst.Name and func.func.value == "getattr" and len(func.args) == 2
            and self.ctx.qualified_name(func.func) is None  # the builtin, not an imported `getattr`
        ):
            module = func.args[0].value
        else:
            return None
        qualified = self.ctx.qualified_name(module)
        is_builders = qualified is not None and (qualified + ".").startswith(MODELS) and (
            qualified + "." == MODELS or qualified[len(MODELS):] in TASK_FOLDERS
        )
        return qualified if is_builders else None

    def _fix(self, node: cst.Call, arg: cst.Arg, old: str, new: str, key: Optional[str]) -> Optional[Fix]:
        if semantics.keyword(node, new) is not None or semantics.has_star_kwargs(node):
            return None
        value = semantics.literal(arg.value)
        if value is False:
            weights = "None"
        elif value is True and key in legacy_weights()[old]:
            weights = f'"{legacy_weights()[old][key]}"'
        else:
            return None
        edits = (self.ctx.replace(arg.keyword, new), self.ctx.replace(arg.value, weights))
        return Fix.safe(f"Pass `{new}={weights}`", *edits)
