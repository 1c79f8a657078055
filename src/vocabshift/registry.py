"""The registry of initialization methods: name -> (pure function, frozen config dataclass, display name, paper)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Union

from .arguments import is_int
from .errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    MethodOptionError,
    MethodOptionTypeError,
    UnknownMethodError,
)

if TYPE_CHECKING:  # methods import this module to register themselves: the Protocol is for the type checker only
    from .methods.base import InitMethod

__all__ = ["MethodSpec", "build_config", "get_method", "list_methods", "method_table", "register_method"]

_NAME = re.compile(r"[a-z][a-z0-9_]*")  # fullmatch: "$" would take a name ending in a newline


@dataclass(frozen=True)
class MethodSpec:
    """A registered method: `function(context, config) -> InitResult` and its metadata."""

    name: str
    function: InitMethod
    config_class: type
    pretty_name: str
    paper_url: str | None
    summary: str


_METHODS: dict[str, MethodSpec] = {}


def register_method(
    name: str, *, config_class: type, pretty_name: str, paper_url: str | None = None, summary: str = ""
) -> Callable[[InitMethod], InitMethod]:
    """Register an initialization method under `name` (decorator).

    Args:
        name (`str`): lower-case identifier used as `method=` in `extend_vocabulary`.
        config_class (`type`): a frozen dataclass holding the method's options.
        pretty_name (`str`): display name for the method table of the docs and for model cards.
        paper_url (`str`, *optional*): link to the method's paper.
        summary (`str`, *optional*): one line for the method table.

    Raises:
        `InvalidArgumentError`: if the name is malformed, taken (by vocabshift, or by a function defined elsewhere:
            the same function defined again, as when a notebook cell runs twice, replaces it), `config_class` is not a
            frozen dataclass (the class) or has annotations that cannot be resolved, `pretty_name` is empty, or what
            is decorated is not a function (`InvalidArgumentTypeError`).
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgumentError(f"Method name {name!r} is invalid: use lower-case letters, digits and '_'.")
    if name in _METHODS and _site(_METHODS[name].function).startswith("vocabshift."):
        raise _taken(name)
    _check_config_class(name, config_class)
    if not isinstance(pretty_name, str) or not pretty_name:
        raise InvalidArgumentError(f"pretty_name={pretty_name!r} for {name!r} is invalid: pass the method's display "
                                   "name, e.g. 'FOCUS'.")

    def decorator(function: InitMethod) -> InitMethod:
        if not callable(function):
            raise InvalidArgumentTypeError(f"register_method({name!r}) decorates a {type(function).__name__}: "
                                           "decorate the method's function.")
        if name in _METHODS and _site(_METHODS[name].function) != _site(function):
            raise _taken(name)
        _METHODS[name] = MethodSpec(name, function, config_class, pretty_name, paper_url, summary)
        return function

    return decorator


def _check_config_class(name: str, config_class: Any) -> None:
    """A frozen dataclass (the class, not an instance) whose annotations resolve, as `build_config` reads them."""
    params = getattr(config_class, "__dataclass_params__", None)
    if not isinstance(config_class, type) or params is None or not params.frozen:
        raise InvalidArgumentError(f"config_class for {name!r} must be a frozen dataclass (the class itself), got "
                                   f"{config_class!r}.")
    try:
        typing.get_type_hints(config_class)
    except (NameError, TypeError, AttributeError) as error:  # what evaluating an annotation's string can raise
        raise InvalidArgumentError(
            f"config_class {config_class.__qualname__} for {name!r} has an annotation that cannot be resolved "
            f"({type(error).__name__}: {error}): import the types its fields name at the top of its module."
        ) from None


def _site(function: Any) -> str:
    """Where a function is defined: the same for its new definition when a notebook cell or module runs again."""
    return f"{getattr(function, '__module__', None)}.{getattr(function, '__qualname__', None)}"


def _taken(name: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"Method {name!r} is already registered (by {_site(_METHODS[name].function)}); pick "
                                "another name. (Running the code that registered it again replaces it.)")


def list_methods() -> list[str]:
    """Names of all registered initialization methods, sorted."""
    return sorted(_METHODS)


def get_method(name: str) -> MethodSpec:
    """The registered method called `name`.

    Raises:
        `UnknownMethodError`: listing every registered name.
    """
    if not isinstance(name, str) or name not in _METHODS:
        raise UnknownMethodError(f"Unknown method {name!r}. Available: {', '.join(list_methods())}.")
    return _METHODS[name]


def method_table() -> str:
    """The registered methods as a Markdown table (docs/methods.md shows this output)."""
    rows = ["| method | name | what it does | options |", "|---|---|---|---|"]
    for name in list_methods():
        spec = _METHODS[name]
        title = f"[{spec.pretty_name}]({spec.paper_url})" if spec.paper_url else spec.pretty_name
        options = ", ".join(f"`{f.name}`" for f in dataclasses.fields(spec.config_class)) or "—"
        rows.append(f"| `{name}` | {title} | {spec.summary} | {options} |")
    return "\n".join(rows)


def build_config(spec: MethodSpec, options: dict[str, Any]) -> Any:
    """Validate `options` against the method's config dataclass and build the config.

    Raises:
        `MethodOptionTypeError`: for an unknown option (listing the accepted ones) or a value of the wrong type.
        `MethodOptionError`: for a value of the right type that is none of the accepted choices, a float that is
            NaN or infinite, or an option without a default left out; the config's `__post_init__` raises it for
            values out of range.
    """
    hints = typing.get_type_hints(spec.config_class)  # resolvable: register_method checked it
    fields = {f.name: f for f in dataclasses.fields(spec.config_class)}
    for key, value in sorted(options.items()):
        if key not in fields:
            accepted = ", ".join(sorted(fields)) or "none"
            raise MethodOptionTypeError(
                f"Unknown option {key!r} for method {spec.name!r}. Accepted options: {accepted}."
            )
        _check_option(spec.name, key, value, hints[key])
    missing = [name for name, f in fields.items() if name not in options and _required(f)]
    if missing:
        raise MethodOptionError(f"Method {spec.name!r} needs the option{'s' * (len(missing) > 1)} "
                                f"{', '.join(missing)}, which {'have' if len(missing) > 1 else 'has'} no default: "
                                f"pass {missing[0]}=... .")
    return spec.config_class(**options)


def _check_option(method: str, key: str, value: Any, annotation: Any) -> None:
    if not _matches(value, annotation):
        error = MethodOptionError if _matches(value, annotation, choices=False) else MethodOptionTypeError
        raise error(
            f"Option {key}={value!r} for method {method!r} has the wrong type or value: "
            f"expected {_describe(annotation)}."
        )
    if isinstance(value, float) and not math.isfinite(value):  # no option means anything by NaN or an infinity
        raise MethodOptionError(f"Option {key}={value!r} is invalid for method {method!r}: pass a finite number.")


def _required(field: dataclasses.Field[Any]) -> bool:
    return field.init and field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _matches(value: Any, annotation: Any, *, choices: bool = True) -> bool:
    """Whether `value` is of `annotation`; `choices=False` takes any value of a Literal's type (a str for
    `Literal["a", "b"]`), to tell a value out of the choices from a value of the wrong type."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin is Literal:
        return any((value == choice or not choices) and type(value) is type(choice)
                   for choice in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        return any(_matches(value, arg, choices=choices) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return is_int(value)
    if annotation is os.PathLike:
        return isinstance(value, os.PathLike)
    return isinstance(value, origin or annotation)


def _describe(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(choice) for choice in typing.get_args(annotation))
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in typing.get_args(annotation))
    return "None" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))
