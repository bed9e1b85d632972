"""The methods: one module each (graph, reward, trained and frozen roles, one ``Method`` record),
found by name through the registry; installed packages' methods and a user's own graphs
(``file.py:NAME``, ``package.module:NAME``) are found the same way."""

from ragteam.graphs.methods.registry import (Method, broken_methods, build_graph, get_method, make_reward, methods,
                                     register, reward_schemes)

__all__ = ["Method", "broken_methods", "build_graph", "get_method", "make_reward", "methods", "register",
           "reward_schemes"]
