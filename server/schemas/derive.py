"""`…Out` models derived from the domain types they carry, so that a field is declared once.

A read-model or an alert leaves the server field for field: the `…Out` model used to spell
every field of its domain type again, and two copies drift. Here the domain type's fields make
the model, and the `…Out` class states only what the wire adds:

    @derived_from(Alert, linked_alert_id=Field(description="The alert a precursor follows"))
    class AlertOut(BaseModel):
        '''One alert: opened when a rule fired on a run's series; ...'''

        model_config = ConfigDict(from_attributes=True)

The decorated class is a spec: its name, docstring, base, config and the fields it declares
itself (those the domain type lacks, after the domain's unless `after` places them). The model
that takes its name is built with `pydantic.create_model` from the domain type's fields, in
their order, each typed as the wire carries it: a `tuple[X, ...]` as a list, a `Mapping` as a
dict, a domain type nested in another as the `…Out` derived from it (derived first). A keyword
override (a `Field(...)` or a plain default) adds a description or a default to one field;
without one the field is required: what a client may find missing is the wire's to say, not a
convenience default of whoever builds the domain value. `exclude` leaves fields off the wire.

A spec that declares a domain field again, or names a field its domain type lacks, is refused
at import, as is a nested domain type with no `…Out` derived yet.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import functools
import inspect
import operator
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from pydantic import BaseModel, create_model

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class Derivation:
    """An `…Out` model and the domain type it was derived from, with the domain fields it
    leaves out (`excluded`) and the fields of its own (`own`)."""

    domain: type
    out: type[BaseModel]
    excluded: frozenset[str]
    own: tuple[str, ...]


_DERIVED: dict[type, Derivation] = {}
"""Domain type → its derivation, in the order derived; one `…Out` per domain type, so a nested
domain type has one wire form."""


def derivations() -> tuple[Derivation, ...]:
    """Every `…Out` derived so far (those of the schema modules imported)."""
    return tuple(_DERIVED.values())


def domain_fields(domain: type) -> tuple[str, ...]:
    """The field names of a frozen dataclass or a named tuple, in their order."""
    if dataclasses.is_dataclass(domain):
        return tuple(f.name for f in dataclasses.fields(domain))
    if _is_named_tuple(domain):
        return tuple(cast(Any, domain)._fields)
    raise TypeError(f"{domain.__name__} is neither a dataclass nor a named tuple")


def derived_from(
    domain: type,
    /,
    *,
    exclude: Collection[str] = (),
    after: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Callable[[type[M]], type[M]]:
    """Build the decorated `…Out` spec from `domain`'s fields (see the module's docstring);
    `after` maps a field to the one it follows when the domain's order is not the wire's."""

    def derive(spec: type[M]) -> type[M]:
        fields = _fields(spec, domain, frozenset(exclude), overrides)
        definitions: dict[str, Any] = {n: fields[n] for n in _placed(list(fields), after, spec)}
        model = create_model(
            spec.__name__,
            __base__=cast(tuple[type[M], ...], spec.__bases__),
            __module__=spec.__module__,
            __doc__=spec.__doc__,
            __cls_kwargs__=dict(spec.model_config),  # the spec's config, its base's included
            **definitions,
        )
        _DERIVED[domain] = Derivation(domain, model, frozenset(exclude), tuple(_own(spec)))
        return model

    if domain in _DERIVED:
        raise TypeError(f"{domain.__name__} already has its …Out: {_DERIVED[domain].out.__name__}")
    return derive


def _fields(
    spec: type[BaseModel], domain: type, exclude: frozenset[str], overrides: Mapping[str, Any]
) -> dict[str, tuple[Any, Any]]:
    """The model's fields (name → type, default or `Field`): the domain's, then the spec's own."""
    names = domain_fields(domain)
    bases = [base for base in spec.__bases__ if issubclass(base, BaseModel)]
    inherited = {name for base in bases for name in base.model_fields}
    own = _own(spec)
    again = f"declares again what {domain.__name__} declares (a keyword of derived_from says more):"
    _refuse(spec, again, set(own) & set(names))
    _refuse(spec, f"names what {domain.__name__} lacks:", (set(overrides) | exclude) - set(names))
    _refuse(spec, "overrides what its base already derived:", set(overrides) & inherited)
    extra = {k for k in vars(spec) if not k.startswith("_")} - {"model_config"}
    _refuse(spec, "holds more than a docstring, a config and fields:", extra)
    hints = typing.get_type_hints(domain)
    derived = {
        name: (wire_type(hints[name]), overrides.get(name, ...))
        for name in names
        if name not in exclude and name not in inherited
    }
    return derived | {n: (spec.model_fields[n].annotation, spec.model_fields[n]) for n in own}


def _own(spec: type[BaseModel]) -> list[str]:
    """Fields the spec declares itself (not inherited from its base)."""
    return [n for n in spec.model_fields if n in inspect.get_annotations(spec)]


def _placed(order: list[str], after: Mapping[str, str] | None, spec: type[BaseModel]) -> list[str]:
    """`order` with each field of `after` moved to follow the one it names."""
    after = after or {}
    _refuse(spec, "places unknown field(s)", (set(after) | set(after.values())) - set(order))
    for name, anchor in after.items():
        order.remove(name)
        order.insert(order.index(anchor) + 1, name)
    return order


def _refuse(spec: type[BaseModel], what: str, names: Collection[str]) -> None:
    if names:
        raise TypeError(f"{spec.__name__} {what} {', '.join(sorted(names))}")


def wire_type(tp: Any) -> Any:
    """`tp`, a domain field's type, as the wire carries it: a derived domain type as its
    `…Out`, `tuple[X, ...]` as `list[X]`, a `Mapping` as a `dict`, `object` as `Any`; unions
    member by member; anything else (`str`, a `Literal`, …) as it is."""
    if tp in _DERIVED:
        return _DERIVED[tp].out
    if tp is object:
        return Any
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[wire_type(args[0])]  # type: ignore[misc]
    if origin in (collections.abc.Mapping, dict):
        return dict[wire_type(args[0]), wire_type(args[1])]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        members = tuple(wire_type(a) for a in args)
        return tp if members == args else functools.reduce(operator.or_, members)
    if dataclasses.is_dataclass(tp) or _is_named_tuple(tp) or origin in (tuple, list):
        raise TypeError(f"{tp!r} has no wire form: derive its …Out first")
    return tp


def _is_named_tuple(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, tuple) and hasattr(tp, "_fields")
