"""Every rule's code, name, opt-in and preview flags: what configuration needs, readable without importing the rules.

Importing the rules imports libcst, about a third of a second; a run whose every file is
answered from the cache needs neither. Written by `python -m torchlint.docs` from the rule
classes and checked against them by tests/test_rules_catalogue.py: do not edit by hand.
"""

from typing import NamedTuple, Tuple


class RuleEntry(NamedTuple):
    code: str
    name: str
    opt_in: bool
    preview: bool


RULES: Tuple[RuleEntry, ...] = (
    RuleEntry("TL000", "parse-error", False, False),
    RuleEntry("TL001", "unused-noqa", False, False),
    RuleEntry("TL101", "backward-under-no-grad", False, False),
    RuleEntry("TL102", "step-without-zero-grad", False, True),
    RuleEntry("TL103", "loss-accumulated-with-graph", False, True),
    RuleEntry("TL104", "non-leaf-requires-grad", False, False),
    RuleEntry("TL105", "no-grad-in-data-pipeline", False, False),
    RuleEntry("TL106", "eval-without-no-grad", False, True),
    RuleEntry("TL107", "train-mode-not-restored", False, True),
    RuleEntry("TL109", "scheduler-before-optimizer-step", False, True),
    RuleEntry("TL110", "update-cancelled-by-order", False, False),
    RuleEntry("TL111", "clip-before-unscale", False, False),
    RuleEntry("TL112", "optimizer-rebuilt-in-loop", False, False),
    RuleEntry("TL113", "criterion-overwritten", False, False),
    RuleEntry("TL114", "method-not-called", False, False),
    RuleEntry("TL115", "step-between-shared-backward", False, False),
    RuleEntry("TL116", "accumulation-loss-not-scaled", False, False),
    RuleEntry("TL201", "mixed-device-styles", False, False),
    RuleEntry("TL202", "chained-conversion", False, True),
    RuleEntry("TL203", "label-cast-to-float", False, False),
    RuleEntry("TL204", "float64-from-numpy", False, False),
    RuleEntry("TL205", "cuda-without-fallback", False, True),
    RuleEntry("TL206", "factory-then-move", False, True),
    RuleEntry("TL207", "explicit-float64", True, False),
    RuleEntry("TL208", "discarded-conversion", False, False),
    RuleEntry("TL301", "persistent-dataloader-in-loop", False, False),
    RuleEntry("TL302", "workers-without-main-guard", False, False),
    RuleEntry("TL303", "persistent-workers-without-workers", False, False),
    RuleEntry("TL304", "unpicklable-worker-callable", False, False),
    RuleEntry("TL305", "rng-object-in-dataset", False, False),
    RuleEntry("TL306", "synchronous-dataloader", True, False),
    RuleEntry("TL307", "distributed-sampler-without-set-epoch", False, False),
    RuleEntry("TL308", "ddp-without-distributed-sampler", False, False),
    RuleEntry("TL309", "host-sync-in-step", True, False),
    RuleEntry("TL310", "loop-invariant-transfer", True, False),
    RuleEntry("TL311", "unseeded-training", True, False),
    RuleEntry("TL401", "softmax-before-cross-entropy", False, False),
    RuleEntry("TL402", "sigmoid-before-bce-with-logits", False, False),
    RuleEntry("TL403", "softmax-into-nll-loss", False, False),
    RuleEntry("TL404", "activation-into-wrong-loss", False, False),
    RuleEntry("TL501", "unsafe-torch-load", False, True),
    RuleEntry("TL502", "whole-object-checkpoint", False, False),
    RuleEntry("TL503", "refused-checkpoint-value", False, False),
    RuleEntry("TL601", "removed-api", False, True),
    RuleEntry("TL602", "deprecated-api", False, False),
    RuleEntry("TL603", "requires-grad-typo", False, False),
    RuleEntry("TL604", "checkpoint-without-use-reentrant", False, False),
    RuleEntry("TL605", "private-api", False, False),
    RuleEntry("TL606", "log1p", False, False),
    RuleEntry("TL607", "expm1", False, False),
    RuleEntry("TL608", "torchvision-pretrained", False, True),
    RuleEntry("TL609", "torchvision-to-tensor-v2", False, False),
    RuleEntry("TL610", "dataloader-iterator-next-method", False, False),
    RuleEntry("TL611", "index-zero-dim-tensor", False, False),
    RuleEntry("TL612", "volatile-variable", False, False),
    RuleEntry("TL613", "removed-keyword", False, False),
    RuleEntry("TL614", "packed-sequence-unpacked", False, False),
    RuleEntry("TL615", "softmax-implicit-dim", False, False),
    RuleEntry("TL701", "unregistered-submodules", False, False),
    RuleEntry("TL702", "layer-built-in-forward", False, False),
    RuleEntry("TL703", "module-api-shadowed", False, False),
    RuleEntry("TL704", "uninitialized-parameter", False, False),
    RuleEntry("TL705", "dropout-always-on", False, True),
    RuleEntry("TL706", "module-requires-grad-attribute", False, False),
    RuleEntry("TL707", "tensor-attribute-not-buffer", False, True),
)
