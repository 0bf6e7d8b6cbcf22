"""``python -m wap_core``: the command line for orchestrators.

Exit codes: 0 success / audit passed, 1 refused / audit failed, 2 bad input or error.
Errors are one readable message on stderr; ``--debug`` adds the traceback.

The package: :mod:`.parser` (the arguments), :mod:`.commands` (one handler per command),
:mod:`.output` (printing) and :mod:`.runner` (:func:`main` runs one command).
"""

from wap_core.cli.commands import COMMANDS
from wap_core.cli.parser import build_parser
from wap_core.cli.runner import main

__all__ = ["COMMANDS", "build_parser", "main"]
