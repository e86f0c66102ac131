"""Every rule's code, name and opt-in flag: what configuration needs, readable without importing the rules.

Importing the rules imports libcst, about a third of a second; a run whose every file is
answered from the cache needs neither. Written by `python -m torchlint.docs` from the rule
classes and checked against them by tests/test_rules_catalogue.py: do not edit by hand.
"""

from typing import NamedTuple, Tuple


class RuleEntry(NamedTuple):
    code: str
    name: str
    opt_in: bool


RULES: Tuple[RuleEntry, ...] = (
    RuleEntry("TL000", "parse-error", False),
    RuleEntry("TL001", "unused-noqa", False),
    RuleEntry("TL101", "backward-under-no-grad", False),
    RuleEntry("TL102", "step-without-zero-grad", False),
    RuleEntry("TL103", "loss-accumulated-with-graph", False),
    RuleEntry("TL104", "non-leaf-requires-grad", False),
    RuleEntry("TL105", "no-grad-in-data-pipeline", False),
    RuleEntry("TL106", "eval-without-no-grad", False),
    RuleEntry("TL107", "train-mode-not-restored", False),
    RuleEntry("TL109", "scheduler-before-optimizer-step", False),
    RuleEntry("TL110", "update-cancelled-by-order", False),
    RuleEntry("TL111", "clip-before-unscale", False),
    RuleEntry("TL112", "optimizer-rebuilt-in-loop", False),
    RuleEntry("TL113", "criterion-overwritten", False),
    RuleEntry("TL114", "method-not-called", False),
    RuleEntry("TL115", "step-between-shared-backward", False),
    RuleEntry("TL116", "accumulation-loss-not-scaled", False),
    RuleEntry("TL201", "mixed-device-styles", False),
    RuleEntry("TL202", "chained-conversion", False),
    RuleEntry("TL203", "label-cast-to-float", False),
    RuleEntry("TL204", "float64-from-numpy", False),
    RuleEntry("TL205", "cuda-without-fallback", False),
    RuleEntry("TL206", "factory-then-move", False),
    RuleEntry("TL207", "explicit-float64", True),
    RuleEntry("TL208", "discarded-conversion", False),
    RuleEntry("TL301", "persistent-dataloader-in-loop", False),
    RuleEntry("TL302", "workers-without-main-guard", False),
    RuleEntry("TL303", "persistent-workers-without-workers", False),
    RuleEntry("TL304", "unpicklable-worker-callable", False),
    RuleEntry("TL305", "rng-object-in-dataset", False),
    RuleEntry("TL306", "synchronous-dataloader", True),
    RuleEntry("TL307", "distributed-sampler-without-set-epoch", False),
    RuleEntry("TL308", "ddp-without-distributed-sampler", False),
    RuleEntry("TL309", "host-sync-in-step", True),
    RuleEntry("TL310", "loop-invariant-transfer", True),
    RuleEntry("TL311", "unseeded-training", True),
    RuleEntry("TL401", "softmax-before-cross-entropy", False),
    RuleEntry("TL402", "sigmoid-before-bce-with-logits", False),
    RuleEntry("TL403", "softmax-into-nll-loss", False),
    RuleEntry("TL404", "activation-into-wrong-loss", False),
    RuleEntry("TL501", "unsafe-torch-load", False),
    RuleEntry("TL502", "whole-object-checkpoint", False),
    RuleEntry("TL503", "refused-checkpoint-value", False),
    RuleEntry("TL601", "removed-api", False),
    RuleEntry("TL602", "deprecated-api", False),
    RuleEntry("TL603", "requires-grad-typo", False),
    RuleEntry("TL604", "checkpoint-without-use-reentrant", False),
    RuleEntry("TL605", "private-api", False),
    RuleEntry("TL606", "log1p", False),
    RuleEntry("TL607", "expm1", False),
    RuleEntry("TL608", "torchvision-pretrained", False),
    RuleEntry("TL609", "torchvision-to-tensor-v2", False),
    RuleEntry("TL610", "dataloader-iterator-next-method", False),
    RuleEntry("TL611", "index-zero-dim-tensor", False),
    RuleEntry("TL612", "volatile-variable", False),
    RuleEntry("TL613", "removed-keyword", False),
    RuleEntry("TL614", "packed-sequence-unpacked", False),
    RuleEntry("TL615", "softmax-implicit-dim", False),
    RuleEntry("TL701", "unregistered-submodules", False),
    RuleEntry("TL702", "layer-built-in-forward", False),
    RuleEntry("TL703", "module-api-shadowed", False),
    RuleEntry("TL704", "uninitialized-parameter", False),
    RuleEntry("TL705", "dropout-always-on", False),
    RuleEntry("TL706", "module-requires-grad-attribute", False),
    RuleEntry("TL707", "tensor-attribute-not-buffer", False),
)
