"""What a file's text must hold for a rule to be able to report in it.

Each rule names, in its `triggers`, text that occurs in every file it can report in;
the engine runs the rule only on files that hold it (torchlint/engine/prefilter.py).
Each kind of evidence (read from the text once per file by `FileText`,
torchlint/engine/file_text.py) is a superset of what rules read, so that a trigger
never misses a file the rule would report in:

- `words(...)`: whole `\\w+` runs anywhere in the text (code, strings, comments).
  A name resolved through imports has every part of its dotted path written in the
  file (in the import or in the attribute chain), so the last part is a sound word.
- `attributes(...)`: names written right after a dot, as in `x.to(...)` or `x . cuda`:
  what a rule that matches method calls by name needs.
- `fragments(...)`: parts of words, in any case: for names a rule recognises by
  pattern (`lr_Scheduler` holds `sched`).
- `functions(predicate)`: a name written after `def` that the rule's own predicate
  accepts: for rules that report only in functions named a certain way.
- `project_imports()`: an import of a module that is a file of the project
  (torchlint/analysis/project.py): for rules whose evidence may sit in that file,
  so that nothing of it is written in this one.

`a & b` needs both, `a | b` either.
"""

from __future__ import annotations

from typing import Callable, FrozenSet, Tuple

from torchlint.analysis.project import PROJECT
from torchlint.engine.file_text import FileText


class Trigger:
    def matches(self, text: FileText) -> bool:
        raise NotImplementedError

    def __and__(self, other: "Trigger") -> "Trigger":
        return _AllOf((self, other))

    def __or__(self, other: "Trigger") -> "Trigger":
        return _AnyOf((self, other))


class _Words(Trigger):
    spelled = "words"

    def __init__(self, names: FrozenSet[str]):
        self.names = names

    def matches(self, text: FileText) -> bool:
        return not self.names.isdisjoint(text.words)

    def __repr__(self) -> str:
        return f"{self.spelled}({', '.join(map(repr, sorted(self.names)))})"


class _Attributes(_Words):
    spelled = "attributes"

    def matches(self, text: FileText) -> bool:
        return not self.names.isdisjoint(text.attributes)


class _Fragments(Trigger):
    def __init__(self, parts: Tuple[str, ...]):
        self.parts = parts

    def matches(self, text: FileText) -> bool:
        lowered = text.lowered
        for part in self.parts:
            if part in lowered:
                return True
        return False

    def __repr__(self) -> str:
        return f"fragments({', '.join(map(repr, self.parts))})"


class _Functions(Trigger):
    def __init__(self, accepts: Callable[[str], bool]):
        self.accepts = accepts

    def matches(self, text: FileText) -> bool:
        return any(map(self.accepts, text.defined))

    def __repr__(self) -> str:
        return f"functions({self.accepts.__name__})"


class _ProjectImports(Trigger):
    def matches(self, text: FileText) -> bool:
        # Several rules ask; the file system is asked once per file.
        found = text.memo.get(_ProjectImports)
        if found is None:
            found = text.memo[_ProjectImports] = bool(text.filename) and PROJECT.imported_by(text.filename, text.imported_modules)
        return found

    def __repr__(self) -> str:
        return "project_imports()"


class _AllOf(Trigger):
    joined_by = " & "

    def __init__(self, parts: Tuple[Trigger, ...]):
        self.parts = parts

    def matches(self, text: FileText) -> bool:
        # A loop, not `all()` over a generator: asked of every rule on every file, and twice as fast.
        for part in self.parts:
            if not part.matches(text):
                return False
        return True

    def __repr__(self) -> str:
        return "(" + self.joined_by.join(map(repr, self.parts)) + ")"


class _AnyOf(_AllOf):
    joined_by = " | "

    def matches(self, text: FileText) -> bool:
        for part in self.parts:
            if part.matches(text):
                return True
        return False


def words(*names: str) -> Trigger:
    return _Words(frozenset(names))


def attributes(*names: str) -> Trigger:
    return _Attributes(frozenset(names))


def fragments(*parts: str) -> Trigger:
    """Parts of words, matched whatever their case (give them in lower case)."""
    return _Fragments(tuple(part.lower() for part in parts))


def functions(accepts: Callable[[str], bool]) -> Trigger:
    """A function defined with a name `accepts` says yes to (pass the predicate the rule itself decides by)."""
    return _Functions(accepts)


def project_imports() -> Trigger:
    """The file imports a module that is a file of its project."""
    return _ProjectImports()
