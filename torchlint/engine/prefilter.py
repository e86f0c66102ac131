"""Skip the libcst parse of files that no selected rule can report on.

Parsing is most of a lint's cost, and a quarter of the files in a PyTorch project
(tokenizers, configs, CLI glue, other frameworks' ports) never mention anything a
rule looks for. Each rule has a text trigger here: a pattern that occurs in every
file the rule can report in. A rule that resolves names through the file's imports
needs `torch` in the text (`import torch as T`, `from torch import nn`, and
`torchvision`/`functorch` all contain it); a rule that also goes by names or method
calls (`.cuda()`, `optimizer.step()` next to `.backward()`, a `*sched*` receiver)
lists those words. A file in which no selected rule's trigger occurs is not parsed.

A rule missing from `TRIGGERS` has no trigger: every file is parsed for it, so a new
rule is never silenced by this module, only not yet accelerated. Adding its entry is
proven safe by `benchmarks/run.py`, which lints the whole corpus with and without
the prefilter and requires identical findings.

TL000 (parse error) needs no libcst either: a skipped file is checked with Python's
own compiler (about a tenth of the parse's cost), and a file that does not compile
is parsed as usual, so its TL000 is the engine's, word for word.
"""

from __future__ import annotations

import re
import warnings
from functools import lru_cache
from typing import Dict, FrozenSet, Optional, Pattern

# Regular-expression fragments, one per rule; each must match somewhere in any file the rule reports in.
TORCH = r"torch"
TRIGGERS: Dict[str, str] = {
    # autograd: the receivers and calls these rules match are torch's, or named by what they do.
    "TL101": TORCH,
    "TL102": r"backward",  # no clearing is a finding only in a loop that calls .backward()
    "TL103": TORCH + r"|backward|criterion|loss",
    "TL104": TORCH,
    "TL105": TORCH,
    # A model is torch-built, from a builder, or a receiver of .eval()/.train()/.parameters().
    "TL106": TORCH + r"|\.\s*(?:eval|train|parameters)\b|from_pretrained|create_model",
    "TL107": r"backward",  # the loop must train: backward + step
    "TL109": r"(?i:sched)",  # scheduler receivers are matched case-insensitively
    # device and dtype: method calls on any receiver.
    "TL201": r"cuda",
    "TL202": TORCH + r"|cuda|cpu|to\s*\(",
    "TL203": TORCH + r"|long",
    "TL204": TORCH,
    "TL205": r"cuda",
    "TL206": TORCH,
    "TL207": TORCH + r"|double",
    # data loading: DataLoader and Dataset are resolved through torch imports; processes also via multiprocessing.
    "TL301": TORCH,
    "TL302": TORCH + r"|multiprocessing",
    "TL303": TORCH,
    "TL304": TORCH,
    "TL305": TORCH,
    "TL306": TORCH,
    # losses and serialization: torch functions and nn modules.
    "TL401": TORCH,
    "TL402": TORCH,
    "TL403": TORCH,
    "TL501": TORCH,
    # API hygiene: torch, torchvision and functorch names; `.require_grad` on any object.
    "TL601": TORCH,
    "TL602": TORCH,
    "TL603": r"require_grad",
    "TL604": TORCH,
    "TL605": TORCH,
    "TL606": TORCH,
    "TL607": TORCH,
    "TL608": TORCH,
    "TL609": TORCH,
}
PARSE_ERROR = "TL000"


@lru_cache(maxsize=64)
def _trigger(codes: FrozenSet[str]) -> Optional[Pattern[str]]:
    """One pattern for the selected rules; None when some selected rule has no trigger (parse every file)."""
    fragments = []
    for code in sorted(codes - {PARSE_ERROR}):
        if code not in TRIGGERS:
            return None
        if TRIGGERS[code] not in fragments:
            fragments.append(TRIGGERS[code])
    return re.compile("|".join(f"(?:{fragment})" for fragment in fragments)) if fragments else re.compile(r"(?!)")


def may_report(text: str, codes: FrozenSet[str]) -> bool:
    """False when no rule in `codes` (TL000 aside) can report anything in `text`."""
    trigger = _trigger(frozenset(codes))
    return trigger is None or trigger.search(text) is not None


def compiles(text: str) -> bool:
    """Python's compiler accepts `text`: a cheap stand-in for libcst's parse when only TL000 is at stake."""
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like warn at compile time; the file's own run would show them.
            warnings.simplefilter("ignore")
            compile(text, "<torchlint-prefilter>", "exec", dont_inherit=True)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError: let the parser report it
        return False
    return True


def skippable(text: str, codes: FrozenSet[str]) -> bool:
    """True when linting `text` with `codes` cannot report anything, so the file need not be parsed."""
    if may_report(text, codes):
        return False
    return PARSE_ERROR not in codes or compiles(text)
