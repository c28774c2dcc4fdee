"""A Griffe extension for the API reference (``mkdocs.yml``): a signature says what a call takes.

Griffe reads signatures statically, and two of ours say less there than at run time:

- A class gets the parameters of its ``__init__`` only, so the core's classes, whose stub (``_core.pyi``)
  declares what they take in ``__new__`` (PyO3 constructors), had no signature, and their ``Args`` tables
  said "required" for every parameter, with no types. ``ratekeeper.Limiter`` takes ``(*args, **kwargs)``
  in Python and passes them to the core's ``__new__`` (at run time its ``__signature__`` is the core's).
  Each class of the package whose ``__init__`` is missing or takes only ``*args, **kwargs`` is given an
  ``__init__`` (not rendered: private names are filtered out) with the parameters of the first
  ``__new__`` of its method resolution order that says more, as ``inspect.signature`` of the class does.
  A Python class with no base, no decorator and no constructor takes ``()``; a class of the
  stub without ``__new__`` cannot be made from Python and keeps no signature.
- ``**options: Unpack[SomeTypedDict]`` (the web integrations' shared keywords) becomes one keyword-only
  parameter per key of the TypedDict, typed as there, its default read from the dataclass the extension's
  ``defaults`` option names for that TypedDict (the one that checks and defaults them).
"""

from __future__ import annotations

from typing import Any

import griffe

_UNPACK = {"typing.Unpack", "typing_extensions.Unpack"}


def _passes_everything_on(function: griffe.Function) -> bool:
    """Whether ``function`` takes only ``*args, **kwargs`` (after ``self`` or ``cls``)."""
    kinds = {parameter.kind for parameter in list(function.parameters)[1:]}
    return kinds <= {griffe.ParameterKind.var_positional, griffe.ParameterKind.var_keyword}


def _mro(cls: griffe.Class) -> list[griffe.Class]:
    try:
        return [cls, *cls.mro()]
    except ValueError:
        return [cls]


def _constructor(cls: griffe.Class) -> griffe.Function | None:
    """The first ``__init__`` or ``__new__`` of the class's MRO that says what the class takes."""
    for klass in _mro(cls):
        for name in ("__init__", "__new__"):
            member = klass.members.get(name)
            if isinstance(member, griffe.Function) and not _passes_everything_on(member):
                return member
    return None


def _self() -> griffe.Parameter:
    return griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)


def _give_signature(cls: griffe.Class) -> None:
    source = _constructor(cls)
    if source is not None and source.name == "__init__":
        return  # an __init__ says what it takes: Griffe reads it
    if source is not None:
        parameters = [
            griffe.Parameter(p.name, annotation=p.annotation, kind=p.kind, default=p.default, docstring=p.docstring)
            for p in list(source.parameters)[1:]  # without cls
        ]
    elif cls.filepath.suffix == ".py" and not cls.bases and not cls.decorators:
        parameters = []  # object's constructor: no arguments (a decorator, e.g. @dataclass, may make its own)
    else:
        return  # a base we cannot see (an exception, a TypedDict), or a core class with no constructor
    init = griffe.Function(
        "__init__",
        lineno=cls.lineno,
        endlineno=cls.lineno,
        parent=cls,
        parameters=griffe.Parameters(_self(), *parameters),
        returns="None",
    )
    cls.set_member("__init__", init)


class ConstructorSignatures(griffe.Extension):
    """Signatures as they are at run time: a class's from ``__new__``, ``**options`` unpacked.

    Args:
        defaults: for each TypedDict unpacked in a signature (its path), the dataclass (its path) whose
            fields give the keys' defaults.
    """

    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        super().__init__()
        self.defaults = defaults or {}

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        for module in [pkg, *(m for m in pkg.modules.values() if not m.is_alias)]:
            for cls in list(module.classes.values()):
                if cls.is_alias:
                    continue
                _give_signature(cls)
                for function in cls.functions.values():
                    if not function.is_alias:
                        self._unpack(function)
            for function in module.functions.values():
                if not function.is_alias:
                    self._unpack(function)

    def _unpack(self, function: griffe.Function) -> None:
        """Replaces ``**name: Unpack[TD]`` by a keyword-only parameter per key of ``TD``, with its default."""
        variadic = next((p for p in function.parameters if p.kind is griffe.ParameterKind.var_keyword), None)
        annotation = variadic.annotation if variadic is not None else None
        if not isinstance(annotation, griffe.ExprSubscript) or annotation.canonical_path not in _UNPACK:
            return
        assert variadic is not None
        typed_dict = str(annotation.slice.canonical_path)
        if typed_dict not in self.defaults:
            return
        keys = function.modules_collection[typed_dict].attributes
        defaults = function.modules_collection[self.defaults[typed_dict]].attributes
        del function.parameters[variadic.name]
        for name, key in keys.items():
            if name not in defaults or defaults[name].value is None:
                raise ValueError(f"{self.defaults[typed_dict]} gives no default for {typed_dict}'s {name!r}")
            function.parameters[name] = griffe.Parameter(
                name,
                annotation=key.annotation,
                kind=griffe.ParameterKind.keyword_only,
                default=defaults[name].value,
                docstring=key.docstring,
            )
