"""Runtime health check: the static rules' questions asked of a live model, loader and criterion.

`check(model, loader, criterion=None, optimizer=None)` (checks.py) runs one training
step and returns `Finding`s with TL9xx codes; `memory.measure(...)` counts the bytes of
that step; `torchlint doctor MODULE:FACTORY` (command.py) runs both from the command
line on what `FACTORY()` returns. `docs/health.md` describes every code.

torch is imported inside the functions: the CLI loads this package for every command,
and linting never imports torch.
"""

from torchlint.health.checks import CHECKS, ERROR, WARNING, check, severity
from torchlint.health.command import register

__all__ = ["CHECKS", "ERROR", "WARNING", "check", "register", "severity"]
