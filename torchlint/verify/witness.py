"""What a witness is, and the table of witnesses by rule code.

A witness is a small program that reproduces what a finding claims and ends with
a verdict. Each rule has a canonical witness (its parameters have defaults that
show the rule's documented behaviour) and, where it can, builds one from the
finding's own code; when the finding's code calls anything off the allow-list,
the builder falls back to the canonical witness with the finding's literal
values, and the witness's `note` says so.
"""

from __future__ import annotations

import string
import textwrap
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Optional, Tuple, Union

if TYPE_CHECKING:
    from torchlint.verify.site import Site

FROM_FINDING, CANONICAL = "finding", "canonical"


class Code(str):
    """A template value inserted as source text (a context manager, an expression), not as a literal."""


# Spawn workers re-import torch (about 6 s each on a small machine): spawn witnesses get a minute and more.
SPAWN_TIMEOUT = 90.0


@dataclass(frozen=True)
class Witness:
    code: str
    program: str
    origin: str = CANONICAL
    # What was substituted or why the finding's code was not used.
    note: str = ""
    timeout: float = 30.0
    env: Dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    # Names from the finding's code, judged again on the live objects before the program runs.
    checks: Tuple[str, ...] = ()

    @property
    def key(self) -> tuple:
        """Findings whose witnesses are the same program share one run."""
        return (self.program, self.timeout, tuple(sorted(self.env.items())), self.checks)


@dataclass(frozen=True)
class Entry:
    code: str
    template: str
    defaults: Dict[str, object]
    derive: Optional[Callable[["Site", "Entry"], Union[Witness, str]]]
    timeout: float
    env: Optional[Callable[[str], Dict[str, str]]] = None

    def canonical(self, note: str = "", device: str = "cpu", **values) -> Witness:
        """The canonical program, `values` (literals, inserted with repr) replacing the defaults."""
        unknown = set(values) - set(self.defaults)
        if unknown:
            raise TypeError(f"{self.code}: unknown witness parameters {sorted(unknown)}")
        return self.witness(CANONICAL, note, device, **values)

    def witness(self, origin: str, note: str = "", device: str = "cpu", preamble: str = "", **values) -> Witness:
        """A program from the template: `Code` values go in as source text, others as Python literals.

        `preamble` (the finding file's torch imports, stand-ins) goes before the template.
        """
        filled = {
            name: value if isinstance(value, Code) else repr(value)
            for name, value in {**self.defaults, **values}.items()
        }
        program = preamble + string.Template(textwrap.dedent(self.template).strip("\n") + "\n").substitute(filled)
        env = self.env(device) if self.env else {}
        return Witness(self.code, program, origin, note, self.timeout, env)


WITNESSES: Dict[str, Entry] = {}


def witness(code: str, template: str, timeout: float = 30.0, env=None, **defaults):
    """Register the canonical witness of `code`; used as a decorator on the builder from a finding.

    The template is Python source with `$name` placeholders; `defaults` gives every
    placeholder's canonical value. The decorated function builds a `Witness` from a
    `Site`, or returns `entry.canonical(...)` when the finding's code cannot be used, or
    a string saying why nothing conclusive can run here (`needs a GPU: ...`), reported as
    `skipped (<string>)`.
    """

    def register(derive):
        WITNESSES[code] = Entry(code, template, defaults, derive, timeout, env)
        return derive

    return register

