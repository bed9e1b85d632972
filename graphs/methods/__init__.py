"""The methods: one module each (graph, reward, trained and frozen roles, one ``Method`` record),
found by name through the registry."""

from graphs.methods.registry import (Method, build_graph, get_method, make_reward, methods, register,
                                     reward_schemes)

__all__ = ["Method", "build_graph", "get_method", "make_reward", "methods", "register", "reward_schemes"]
