"""Run each rule only on the files it can report in, and parse only the files some rule can.

Parsing and walking are most of a lint's cost, and most rules can report only where
certain text occurs: a rule about `.backward()` needs the word `backward`, one about
`torch.autograd.Variable` needs `Variable` (however the file imports it, the name's last
part is written somewhere: in the import or in the attribute chain). Each rule says so
in its `triggers` (torchlint/rules/triggers.py); the evidence is read from the file's
text once, lazily, and a rule runs on the file only when its trigger matches. A rule
without triggers runs on every file, so a new rule is never silenced by this module,
only not yet accelerated. A file on which no selected rule runs is not parsed at all.

Triggers are proven by the tests (every rule's example and every fixture finding
matches its rule's trigger) and by `benchmarks/run.py`, which lints the whole corpus
with and without this module (`use_prefilter=False` down the lint call path, from
`lint_files` to `FileContext`) and requires identical findings. One limit is by
design: string literals are read as written, so a string that spells a trigger only
through escapes (`"\\x63uda"`) or implicit concatenation (`"cu" "da"`) does not count.

TL000 (parse error) needs no libcst either: a file no rule runs on is checked with
Python's own compiler (about a tenth of the parse's cost), and a file that does not
compile is parsed as usual, so its TL000 is the engine's, word for word.
"""

from __future__ import annotations

from typing import List, Sequence, Type, Union

from torchlint.engine.file_text import FileText
from torchlint.rules.base import Rule


def runnable(text: Union[str, FileText], rules: Sequence[Type[Rule]]) -> List[Type[Rule]]:
    """The `rules` that can report in `text`."""
    file_text = FileText(text) if isinstance(text, str) else text
    return [rule for rule in rules if rule.triggers is None or rule.triggers.matches(file_text)]
