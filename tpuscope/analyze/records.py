"""The base of the analysis contract's records: typed fields, read from and written as JSON dicts.

A record is the typed form of one JSON object the analysis writes (analysis.json, a finding's
`evidence`). Why a base of our own and not `dataclasses.asdict`: the JSON a run already holds
must come back byte for byte (`show --json` of a stored run prints its keys in the order the
file has them, sorted; a run analysed now prints them in the order the analysis made them), and
keys a record does not declare (written by another version of tpuscope) are kept, not dropped.
So a record remembers the order of the dict it was read from and every key it did not know.

A rule makes its finding's record itself (tpuscope/detect/): the keys it writes are the declared
ones in order, or, for a rule whose findings come in several shapes (a bounded set of graphs
beside a recompile), the `key_order` it states. A record reads as its JSON form (`record["key"]`,
`get`, `keys`), the `JsonObject` that `Finding.evidence` (tpuscope/schema.py, below the
contract) is typed as. Not a `Mapping`: JSON keys named `values` and `items` are fields.
"""

from __future__ import annotations

from collections.abc import Iterator, KeysView
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

if TYPE_CHECKING:  # annotations only: schema pulls in pyarrow, which a launcher never needs
    from tpuscope.schema import JsonObject


R = TypeVar("R", bound="Record")

_OWN = ("extra", "key_order")  # the record's bookkeeping, never a JSON key


@dataclass
class Record:
    """A JSON object with typed fields. Subclasses declare their keys as dataclass fields (every
    one with a default: a record from an older run may lack any key) in the order the analysis
    writes them; `OMIT_NONE` names keys written only when they have a value; `NESTED` maps a
    key to the record type of its value (a record, or a list of records)."""

    OMIT_NONE: ClassVar[frozenset[str]] = frozenset()
    NESTED: ClassVar[dict[str, type[Record]]] = {}

    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False, kw_only=True)
    key_order: tuple[str, ...] | None = field(default=None, repr=False, compare=False, kw_only=True)

    @classmethod
    def declared(cls) -> list[str]:
        """The JSON keys this record declares, in the order it writes them."""
        return [f.name for f in fields(cls) if f.name not in _OWN]

    @classmethod
    def from_dict(cls: type[R], data: JsonObject) -> R:
        """The record of a JSON object as read (a dict, or another record's JSON form); keys it
        does not declare are kept in `extra`."""
        if not isinstance(data, dict):
            data = data.to_dict() if isinstance(data, Record) else {k: data[k] for k in data}
        known = set(cls.declared())
        values = {k: _read(cls.NESTED.get(k), v) for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**values, extra=extra, key_order=tuple(data))

    def to_dict(self) -> dict[str, Any]:
        """The JSON object. A record made by the analysis writes its declared keys in order
        (those in OMIT_NONE only with a value); one read from JSON, or made with a `key_order`
        (the shape its rule writes), gives back those keys in their order, and any key given a
        value since."""
        if self.key_order is None:
            out = {
                k: _write(getattr(self, k))
                for k in self.declared()
                if not (k in self.OMIT_NONE and getattr(self, k) is None)
            }
            out.update(self.extra)
            return out
        read = set(self.key_order)
        out = {k: self._value(k) for k in self.key_order}
        out.update(
            (f.name, _write(getattr(self, f.name)))
            for f in fields(self)
            if f.name not in _OWN and f.name not in read and getattr(self, f.name) != _default(f)
        )
        return out

    def with_values(self: R, **values: Any) -> R:
        """This record with keys given values, as `{**json, **values}` would write them: its
        keys where they were, new ones after them (a pod's hosts on a rule's evidence)."""
        declared = set(self.declared())
        extra = {**self.extra, **{k: v for k, v in values.items() if k not in declared}}
        order = tuple(dict.fromkeys((*self.keys(), *values)))
        return replace(
            self, **{k: v for k, v in values.items() if k in declared}, extra=extra, key_order=order
        )

    def _value(self, key: str) -> Any:
        return self.extra[key] if key in self.extra else _write(getattr(self, key))

    def __getitem__(self, key: str) -> Any:
        """The JSON form's value (`summary["steps"]`): for scripts and tests that read the JSON;
        tpuscope's own surfaces read the typed attributes."""
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        """As dict.get on the JSON form (see __getitem__)."""
        return self.to_dict().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.to_dict()

    def keys(self) -> KeysView[str]:
        """The JSON form's keys: `{**summary}` and `dict(summary)` make its JSON object."""
        return self.to_dict().keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())


def _default(spec: Field[Any]) -> Any:
    if spec.default is not MISSING:
        return spec.default
    return spec.default_factory() if spec.default_factory is not MISSING else None


def _read(kind: type[Record] | None, value: Any) -> Any:
    if kind is None or value is None:
        return value
    if isinstance(value, list):
        return [kind.from_dict(v) if isinstance(v, dict) else v for v in value]
    return kind.from_dict(value) if isinstance(value, dict) else value


def _write(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, list):
        return [v.to_dict() if isinstance(v, Record) else v for v in value]
    return value
