"""Public names that load their module on first use (PEP 562 ``__getattr__``), so that importing
``topo_probe``, ``synth`` or ``kernels`` stays light.

>>> ns = {}
>>> getattr_, dir_ = lazy_exports("demo", {"sqrt": "math", "join": ("os.path", "join")}, ns)
>>> getattr_("sqrt")(9.0), getattr_("join")("a", "b"), "sqrt" in ns, dir_()
(3.0, 'a/b', True, ['join', 'sqrt'])
>>> getattr_("nope")
Traceback (most recent call last):
AttributeError: module 'demo' has no attribute 'nope'
"""

from __future__ import annotations

import importlib


def lazy_exports(package: str, exports: dict, namespace: dict):
    """``(__getattr__, __dir__)`` for ``package``: ``exports`` maps each public name to its
    module, or to ``(module, attribute)`` where the names differ; a name once loaded is kept in
    ``namespace`` (the package's ``globals()``), so the next look-up is an ordinary one."""

    def __getattr__(name: str):
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = target if isinstance(target, tuple) else (target, name)
        value = namespace[name] = getattr(importlib.import_module(module), attr)
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
