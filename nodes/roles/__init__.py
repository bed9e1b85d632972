"""Roles, one module per method family (``base`` says what a role is). ``all_roles()`` finds
every role of every module, so a new module of roles needs no registration."""

from __future__ import annotations

import importlib
import pkgutil

from nodes.roles.base import Role


def all_roles() -> dict[str, Role]:
    found: dict[str, Role] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.update({v.name: v for v in vars(module).values() if isinstance(v, Role)})
    return found


def plumbing_policy():
    """The scripted stand-in for every role: each role's plumbing rule. It exercises the runtime
    end to end without a model; its answers mean nothing."""
    from nodes.policies.scripted import ScriptedPolicy

    return ScriptedPolicy({name: role.plumbing for name, role in all_roles().items() if role.plumbing},
                          name="scripted-plumbing")
