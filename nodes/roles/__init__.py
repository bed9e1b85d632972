"""Roles, one module per method family (``base`` says what a role is). ``all_roles()`` finds
every built-in role of every module, so a new module of roles needs no registration; roles
defined outside ragteam are known by name once created (``nodes.roles.base.plumbing_rule``)."""

from __future__ import annotations

import importlib
import pkgutil

from typing import TYPE_CHECKING

from ragteam.nodes.roles.base import Role, defined_roles, plumbing_rule

if TYPE_CHECKING:
    from ragteam.nodes.policies.scripted import ScriptedPolicy


def all_roles() -> dict[str, Role]:
    """Every role defined in the modules of this package, by name."""
    found: dict[str, Role] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        found.update({v.name: v for v in vars(module).values() if isinstance(v, Role)})
    return found


def known_roles() -> set[str]:
    """The names a role may be given by: every built-in role, and a user's once the module that
    defines it has been imported (a graph is loaded before anything that names its roles)."""
    return set(all_roles()) | defined_roles()


def plumbing_policy() -> "ScriptedPolicy":
    """The scripted stand-in for every role: each role's plumbing rule, looked up when the role
    is asked (so a role created after this policy, e.g. in a user's graph file, is played too).
    It exercises the runtime end to end without a model; its answers mean nothing."""
    from ragteam.nodes.policies.scripted import ScriptedPolicy

    all_roles()  # the built-in roles exist before the first request
    return ScriptedPolicy({}, rule_source=plumbing_rule, name="scripted-plumbing")
