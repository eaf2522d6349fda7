"""What a record of the agent's vocabulary (vocab.py) is: `Wire`, its fields, and how it is
read from and written to wire data.

Part of the agent program (`__init__.py`): stdlib only, Python >= 3.8, no tfctl imports.

A record is a class deriving from `Wire`, its fields written as a dataclass's are (`name:
annotation = default`, `field(default_factory=...)` for a default made anew): frozen, with one
`to_wire()` (a JSON-ready dict) and one `from_wire()`: keys the class does not know are ignored
and a key missing takes the field's default, so a record of an older agent still reads. A class
names where it differs from that rule in two small tables: `WIRE_NAMES` (a field's key on the
wire, where the agent has always spelt it otherwise) and `NESTED` (the record class of a field
that holds records: one, a tuple of them, or a dict of them by name). A request's `REQUIRED`
fields are checked by the agent before its operation runs (`optable.answer_to`). `fields(cls)`
lists a record's fields and `replace(record, **changes)` copies one with changes, as
`dataclasses.fields` and `dataclasses.replace` do for a dataclass.

Why not dataclasses: every agent start defines every record, and `dataclasses` costs that start
more than the rest of the agent together (its import brings `inspect`, `re` and `enum`; each
class is an `exec` of generated methods): measured in benchmarks/README.md (issue 35). A record
here is a class with `__slots__` made by one small metaclass (`_RecordType`) and one generic
`__init__`; its table of fields is built the first time the class is used. The type checker sees
dataclasses all the same (`dataclass_transform`, PEP 681).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

MYPY = False  # true for the type checker only: what it imports here, the host never does
if MYPY:
    from typing import TypeVar

    from typing_extensions import dataclass_transform

    _W = TypeVar("_W", bound="Wire")
    _T = TypeVar("_T")
else:
    def dataclass_transform(**_: Any) -> Any:
        """The type checker's decorator (PEP 681); at run time it changes nothing."""
        return lambda target: target

ONE, MANY, BY_NAME = "one", "many", "by_name"
"""How a field holds records (`Wire.NESTED`): one, a tuple of them, a dict name → record."""

_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


class _Factory:
    """A field's default made anew for each record: `field(default_factory=...)`."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def field(*, default_factory: Callable[[], _T]) -> _T:
    """A field whose default is made anew for each record (a dict, say), as with dataclasses."""
    return _Factory(default_factory)  # type: ignore[return-value]


_NO_DEFAULT = _Factory(lambda: None)
"""The default of a field declared without one: a record must be given it."""


class Field:
    """One field of a record: its name, its key on the wire, its annotation (a string), the
    records it holds (`Wire.NESTED`) and its default (`field`'s factory for one made anew)."""

    __slots__ = ("annotation", "default", "key", "name", "nested")

    def __init__(self, name: str, key: str, annotation: str,
                 nested: tuple[str, type[Wire]] | None, default: Any) -> None:
        self.name, self.key, self.annotation, self.nested = name, key, annotation, nested
        self.default = default


_FIELDS: dict[type, tuple[Field, ...]] = {}


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class _RecordType(type):
    """Makes a record class: its annotated names are its fields, in `__slots__`; their
    defaults are kept aside (a slot and a class attribute cannot share a name) until `fields`
    builds the class's table, on first use."""

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]
                ) -> _RecordType:
        declared = {n: (a, namespace.pop(n, _NO_DEFAULT))
                    for n, a in namespace.get("__annotations__", {}).items()
                    if not a.startswith("ClassVar")}
        namespace["__slots__"] = tuple(declared)
        namespace["_DECLARED"] = declared
        return super().__new__(mcs, name, bases, namespace)


def fields(cls: type[Wire] | Wire) -> tuple[Field, ...]:
    """The record class's fields, in order (a base class's first), built once per class."""
    if not isinstance(cls, type):
        cls = type(cls)
    found = _FIELDS.get(cls)
    if found is None:
        declared: dict[str, tuple[str, Any]] = {}
        for klass in reversed(cls.__mro__):  # a base class's fields first, in their order
            declared.update(klass.__dict__.get("_DECLARED", {}))
        found = _FIELDS[cls] = tuple(
            Field(name, cls.WIRE_NAMES.get(name, name), annotation, cls.NESTED.get(name),
                  default) for name, (annotation, default) in declared.items())
    return found


def replace(record: _W, **changes: Any) -> _W:
    """A copy of `record` with the fields `changes` names changed (`dataclasses.replace`)."""
    return type(record)(**{**{f.name: getattr(record, f.name) for f in fields(record)},
                           **changes})


class Wire(metaclass=_RecordType):
    """A record of the vocabulary: frozen, compared, hashed and shown by its fields, and read
    from (`from_wire`) and written to (`to_wire`) wire data."""

    WIRE_NAMES: ClassVar[dict[str, str]] = {}
    """field → its key on the wire, where the two differ."""
    NESTED: ClassVar[dict[str, tuple[str, type[Wire]]]] = {}
    """field → (ONE | MANY | BY_NAME, the record class of its value)."""
    REQUIRED: ClassVar[tuple[str, ...]] = ()
    """A request's fields without which the agent refuses it (`bad_request`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        table = fields(self)
        if len(args) > len(table):
            raise TypeError(f"{type(self).__name__} has {len(table)} fields, "
                            f"{len(args)} were given")
        for i, f in enumerate(table):
            if i < len(args):
                if f.name in kwargs:
                    raise TypeError(f"{type(self).__name__} was given {f.name!r} twice")
                value = args[i]
            elif f.name in kwargs:
                value = kwargs.pop(f.name)
            elif f.default is _NO_DEFAULT:
                raise TypeError(f"{type(self).__name__} needs {f.name!r}")
            else:
                value = f.default.make() if type(f.default) is _Factory else f.default
            object.__setattr__(self, f.name, value)
        if kwargs:
            raise TypeError(f"{type(self).__name__} has no field {next(iter(kwargs))!r}")
        self.__post_init__()

    def __post_init__(self) -> None:
        """What a record makes of its fields once they are set (none here)."""

    def to_wire(self) -> dict[str, Any]:
        """The record as JSON-ready data, keyed as the wire spells each field."""
        return {f.key: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_wire(cls: type[_W], raw: Mapping[str, Any] | Wire | None) -> _W:
        """The record from wire data (a record of this class passes through as it is)."""
        if isinstance(raw, cls):
            return raw
        if isinstance(raw, Wire):  # a record of another class: by the fields the two share
            raw = raw.to_wire()
        raw = raw or {}
        record = object.__new__(cls)
        for f in fields(cls):
            value = raw.get(f.key, _NO_DEFAULT)
            if value is None and f.annotation in _SCALARS:  # null where never None: the default
                value = _NO_DEFAULT
            if value is _NO_DEFAULT:
                if f.default is _NO_DEFAULT:
                    raise TypeError(f"{cls.__name__} needs {f.key!r}")
                value = f.default.make() if type(f.default) is _Factory else f.default
            elif value is not None:
                value = _read(f.nested, value) if f.nested else _cast(f.annotation, value)
            object.__setattr__(record, f.name, value)
        record.__post_init__()
        return record

    def missing(self) -> list[str]:
        """The `REQUIRED` fields this request lacks."""
        return [name for name in self.REQUIRED if getattr(self, name) is None]

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name!r} cannot be set")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: {name!r} cannot be deleted")

    def __reduce__(self) -> tuple[Any, ...]:
        """Copied and pickled by its fields (`__setattr__` refuses the slots' usual way)."""
        return type(self), self._values()

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        said = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"{type(self).__name__}({said})"


def _plain(value: Any) -> Any:
    if isinstance(value, Wire):
        return value.to_wire()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _cast(annotation: str, value: Any) -> Any:
    if annotation.startswith("tuple") and isinstance(value, list):
        return tuple(value)
    scalar = _SCALARS.get(annotation)
    if scalar is not None and not isinstance(value, scalar):
        try:
            return scalar(value)
        except (TypeError, ValueError):
            return value
    return value


def _read(nested: tuple[str, type[Wire]], value: Any) -> Any:
    shape, kind = nested
    if shape == MANY:
        return tuple(kind.from_wire(v) for v in value)
    if shape == BY_NAME:
        named = "name" in {f.name for f in fields(kind)}
        return {k: kind.from_wire(dict(v, name=k) if named and isinstance(v, dict) and
                                  "name" not in v else v) for k, v in value.items()}
    return kind.from_wire(value)
