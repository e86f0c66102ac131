"""The shape every rule shares.

A rule is one class in one file: its code, kebab name and message, the visitor
methods that find the problem, the fix it offers, and two snippets (`example`,
`use_instead`) that the test suite lints and the docs show. The class docstring
holds the prose sections of the rule's page.

Visitor methods are libcst-style: `visit_Call(self, node)`, `leave_For(self, node)`.
The engine walks each file once and calls every selected rule's methods from that
single walk; `self.ctx` (a `FileContext`) gives the shared facts: imports,
enclosing nodes, assigned values, the module's call graph. `finish()` runs after
the walk, when the call graph is complete.
"""

from __future__ import annotations

import inspect
import textwrap
from typing import TYPE_CHECKING, ClassVar, FrozenSet, Optional

import libcst as cst

from torchlint.analysis.reachability import Reachability
from torchlint.engine.expectations import EXPECT_COMMENT

if TYPE_CHECKING:
    from torchlint.engine.context import FileContext
    from torchlint.finding import Fix
    from torchlint.rules.triggers import Trigger

SECTION_ORDER = ("What it does", "Why is this bad?", "Example", "Use instead", "Fix safety", "Options")
# Said on the page of every rule whose findings are about what happens at run time (`Rule.about_the_source`).
UNREACHABLE_NOT_REPORTED = (
    "Code that never runs is not reported: statements after an unconditional `return`, `raise`, `continue` or "
    "`break` in the same block (or after an `if`/`else` whose every arm ends in one), and the body of `if False:` "
    "or the `else` of `if True:`."
)


class Rule:
    code: ClassVar[str]
    name: ClassVar[str]
    message: ClassVar[str]
    # Rules that are right only for some projects stay out of the default selection.
    opt_in: ClassVar[bool] = False
    # Why the rule is in preview (empty: it is not). A preview rule runs only with `--preview` / `preview = true`,
    # whatever selects it, until two held-out rounds in a row read at least 9 of its findings in 10 true at first
    # sight (docs/precision.md, "The preview tier").
    preview: ClassVar[str] = ""
    # One word for the rules table: "none", "safe", "unsafe", or "safe or unsafe" (the docstring explains).
    fix_safety: ClassVar[str] = "none"
    # Flagged code; each flagged line ends with `# expect: CODE:COLUMN`. Linted by the tests.
    example: ClassVar[str] = ""
    # The corrected code; the tests require it to produce no finding of this rule.
    use_instead: ClassVar[str] = ""
    # What every file this rule can report in holds (torchlint/rules/triggers.py): the engine runs the rule only
    # on such files. None: every file.
    triggers: ClassVar[Optional["Trigger"]] = None
    # Reads `ctx.callgraph` (directly or through a family helper): the engine builds the graph only for such rules.
    uses_callgraph: ClassVar[bool] = False
    # For `visit_reference(node, qualified)`: parts (`Variable`, `amp`) of which every qualified name the rule acts on
    # holds one. The engine then resolves only the references whose written chain or import holds one. None: all.
    reference_parts: ClassVar[Optional[FrozenSet[str]]] = None
    # For `visit_Call`/`leave_Call`: names of which the callee of every call the rule acts on holds one, as written
    # (`backward` for `loss.backward()`, `load` for `torch.load(...)`; `last_parts` of the qualified names it asks
    # about) or in the import its first name comes from (`DL` after `from torch.utils.data import DataLoader as DL`).
    # The engine then calls them only for such calls. None: every call.
    call_parts: ClassVar[Optional[FrozenSet[str]]] = None
    # What a finding says. False: what happens when the code runs (a graph kept, a crash without a GPU), so a finding
    # in code that never runs (after an unconditional `return`, in an `if False:` arm: analysis/reachability.py) is
    # dropped. True: what the source holds, run or not (a removed or deprecated API still has to be migrated in code
    # switched off for now).
    about_the_source: ClassVar[bool] = False

    def __init__(self, ctx: "FileContext"):
        self.ctx = ctx
        self.crashed = False

    def report(self, node: cst.CSTNode, message: Optional[str] = None, fix: Optional["Fix"] = None) -> None:
        if not self.about_the_source and Reachability.of(self.ctx).node_unreachable(node):
            return
        self.ctx.report(self, node, message or self.message, fix)

    def finish(self) -> None:
        """Called once after the walk; rules that decide from whole-module facts report here."""

    @classmethod
    def family(cls) -> str:
        return cls.__module__.split(".")[2]

    @classmethod
    def sections(cls) -> dict:
        """The rule page's sections, from the docstring's `## Heading` blocks and the examples."""
        found = {}
        heading = None
        for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
            if line.startswith("## "):
                heading = line[3:].strip()
                found[heading] = []
            elif heading is not None:
                found[heading].append(line)
        sections = {heading: "\n".join(lines).strip() for heading, lines in found.items()}
        if not cls.about_the_source and sections.get("What it does"):
            sections["What it does"] += "\n\n" + UNREACHABLE_NOT_REPORTED
        if cls.example:
            sections["Example"] = _python_block(strip_expectations(cls.example))
        if cls.use_instead:
            sections["Use instead"] = _python_block(cls.use_instead)
        return {heading: sections[heading] for heading in SECTION_ORDER if sections.get(heading)}

    @classmethod
    def documentation(cls) -> str:
        parts = [f"# {cls.code} {cls.name}", ""]
        if cls.preview:
            parts += [f"In preview: it runs only with `--preview` (or `preview = true`). {cls.preview}", ""]
        if cls.opt_in:
            parts += ["Not in the default selection: enable it with `extend-select`.", ""]
        for heading, body in cls.sections().items():
            parts += [f"## {heading}", "", body, ""]
        return "\n".join(parts).rstrip() + "\n"


def quoted(code: str, limit: int = 40) -> str:
    """Code to quote in a message: itself when it is short and on one line, else `...`."""
    return code if len(code) <= limit and "\n" not in code else "..."


def strip_expectations(code: str) -> str:
    return "\n".join(EXPECT_COMMENT.sub("", line).rstrip() for line in textwrap.dedent(code).strip("\n").splitlines()) + "\n"


def _python_block(code: str) -> str:
    return "```python\n" + textwrap.dedent(code).strip("\n") + "\n```"
