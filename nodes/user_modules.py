"""A user's own Python, imported by reference: ``path/to/file.py`` or ``package.module`` (a
graph, a study's selectors, a chat model for a role). Whatever importing it raises — an exit or
an interrupt included — is one ``ValueError`` line naming the reference."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path


def raised(error: BaseException) -> str:
    """What a user's code raised, as ``Type: first line`` (an exit or an interrupt said as such)."""
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}) (it called sys.exit or exit)"
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0][:300]}" if text else type(error).__name__


def import_user_module(reference: str, where: str, kind: str = "graph"):
    """The module ``where`` names (a ``.py`` file or a dotted module) that ``reference`` (a
    ``kind`` reference, e.g. a graph's ``path/to/file.py:NAME``) points into; whatever importing
    it raises is one ``ValueError`` line naming the reference."""
    if where.endswith(".py"):
        path = Path(where).resolve()
        if not path.is_file():
            raise ValueError(f"{kind} reference {reference!r}: no file {where}")
        # a unique module name per file, so two users' graph.py files never collide
        name = f"ragteam_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:8]}"
        if name in sys.modules:
            return sys.modules[name]
        if str(path.parent) not in sys.path:  # the file may import its own sibling modules
            sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up by name
        try:
            spec.loader.exec_module(module)
        except BaseException as error:  # noqa: BLE001 — an exit or interrupt at import, too
            del sys.modules[name]
            raise ValueError(f"{kind} reference {reference!r}: importing {where} raised "
                             f"{raised(error)}") from None
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as error:
        raise ValueError(f"{kind} reference {reference!r}: no module named {error.name!r}") from None
    except BaseException as error:  # noqa: BLE001
        raise ValueError(f"{kind} reference {reference!r}: importing {where} raised "
                         f"{raised(error)}") from None
