"""Lock names built from a decorated call's arguments (``@redis_lock("order:{order_id}")``).

Each template value is percent-encoded (so no value can end a field early or pass for
another), values longer than MAX_VALUE_CHARS become a digest, and a whole name over the
limit keeps its first bytes and a digest of all of it: the same call always gives the same
name, and distinct calls distinct names.

A template whose fields are all plain parameter names (the common ``order:{order_id}``) is
compiled once: each call then reads the values straight from its arguments, without
``inspect.Signature.bind`` or ``string.Formatter``, and gives the very name the general path
gives. Anything else (attributes, indexes, format specs, ``*args``/``**kwargs`` functions, a
call whose arguments do not fit) takes the general path.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from .core.errors import InvalidArgument
from .core.validation import MAX_NAME_BYTES, check_name

__all__ = ["MAX_VALUE_CHARS", "Namer", "Unbindable", "bounded_name", "encode_value", "signature_of"]

#: Longest encoded value kept as is in a name; longer ones become a digest.
MAX_VALUE_CHARS = 64
#: A name longer than MAX_NAME_BYTES keeps this many bytes, then "~" and a digest of all of it.
_DIGEST_CHARS = 40
_SAFE = "-._@+=,!"  # left as is by the encoding; everything else is %XX (also "~", which
# marks a digest: no encoded value can pass for the digest of another)
_PLAIN = re.compile(rf"[A-Za-z0-9{re.escape(_SAFE)}]{{0,{MAX_VALUE_CHARS}}}")


def encode_value(value: object) -> str:
    """One template value as it appears in a lock name: percent-encoded, bounded."""
    text = str(value)
    if _PLAIN.fullmatch(text):  # nothing to encode (ids, slugs): as quote() would leave it
        return text
    from urllib.parse import quote

    # quote() never escapes "~" itself; lone surrogates are encoded, not refused.
    encoded = quote(text, safe=_SAFE, errors="surrogatepass").replace("~", "%7E")
    if len(encoded) > MAX_VALUE_CHARS:
        return "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return encoded


class _EncodingFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        return encode_value(super().format_field(value, format_spec))


_FORMATTER = _EncodingFormatter()


def bounded_name(name: str) -> str:
    """``name`` if it fits MAX_NAME_BYTES; else its first bytes, "~" and a digest of all of it:
    the same name always gives the same result, and distinct names distinct results."""
    encoded = name.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_NAME_BYTES:
        return name
    keep = MAX_NAME_BYTES - 1 - _DIGEST_CHARS
    head = encoded[:keep].decode("utf-8", "ignore")  # (cut between characters)
    return f"{head}~{hashlib.sha256(encoded).hexdigest()[:_DIGEST_CHARS]}"


def signature_of(func: Callable[..., Any]) -> inspect.Signature:
    """The signature a decorated call binds to."""
    # method_decorator hands decorators a partial of the bound method, "wrapping" the
    # unbound one: its own signature (without self) is the one calls bind to.
    follow = not isinstance(func, functools.partial)
    return inspect.signature(func, follow_wrapped=follow)


class Unbindable(Exception):
    """The call's arguments do not fit the function: calling it will raise its TypeError."""


class Namer:
    """Turns a call's arguments into the lock name."""

    def __init__(
        self, key: str | Callable[..., str], signature: inspect.Signature, label: str
    ) -> None:
        self.key = key
        self.signature = signature
        self.var_keyword = next(
            (
                p.name
                for p in signature.parameters.values()
                if p.kind is inspect.Parameter.VAR_KEYWORD
            ),
            None,
        )
        #: Whether naming may read ``request.user``: an async view then loads the user the
        #: async way first (a callable key may read anything).
        self.reads_user = not isinstance(key, str)
        self._compiled: _Compiled | None = None
        if isinstance(key, str):
            fields = self._check_template(key, label)
            self._compiled = _Compiled.of(key, fields, signature)

    def _check_template(self, template: str, label: str) -> list[str]:
        try:
            fields = [field for _, field, _, _ in _FORMATTER.parse(template) if field is not None]
        except ValueError as exc:
            raise InvalidArgument("key", f"is not a valid template: {exc}") from None
        self.reads_user = any(".user" in field for field in fields)
        for field in fields:
            root = field.split(".", 1)[0].split("[", 1)[0]
            if not root or root.isdigit():
                raise InvalidArgument("key", f"fields must name parameters, not {{{field}}}")
            if root not in self.signature.parameters and self.var_keyword is None:
                raise InvalidArgument(
                    "key", f"field {{{field}}} names no parameter of {label}{self.signature}"
                )
        return fields

    def name(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        if not isinstance(self.key, str):
            name: object = self.key(*args, **kwargs)
            return check_name(bounded_name(name) if isinstance(name, str) else name, "key")
        if self._compiled is not None:
            fast = self._compiled.name(args, kwargs)
            if fast is not None:
                return check_name(bounded_name(fast), "key")
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            raise Unbindable from None
        bound.apply_defaults()
        values = dict(bound.arguments)
        if self.var_keyword is not None:
            values.update(values.pop(self.var_keyword, {}))
        try:
            name = _FORMATTER.vformat(self.key, (), values)
        except (KeyError, AttributeError, IndexError, TypeError) as exc:
            raise InvalidArgument("key", f"template {self.key!r} failed: {exc!r}") from exc
        return check_name(bounded_name(name), "key")


_MISSING = object()


class _Compiled:
    """A template of plain parameter names over a function without ``*args``/``**kwargs``:
    literal parts and, per field, where its value comes from."""

    def __init__(
        self,
        literals: list[str],
        fields: list[tuple[str, int | None, Any]],
        positional: int,
        names: dict[str, int],
        required: list[tuple[str, int]],
    ) -> None:
        self.literals = literals  # one more than fields
        self.fields = fields  # (name, position or None for keyword-only, default)
        self.positional = positional  # how many parameters may be given by position
        self.names = names  # keyword-acceptable name -> position (a large one: keyword-only)
        self.required = required  # (name, position) of parameters without a default

    @classmethod
    def of(cls, template: str, fields: list[str], signature: inspect.Signature) -> _Compiled | None:
        kinds = inspect.Parameter
        params = list(signature.parameters.values())
        if any(p.kind in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD) for p in params):
            return None
        literals: list[str] = []
        parts = list(_FORMATTER.parse(template))
        for _, field, spec, conversion in parts:
            if field is not None and (not field.isidentifier() or spec or conversion):
                return None
        positions = {p.name: i for i, p in enumerate(params)}
        positional = sum(1 for p in params if p.kind is not kinds.KEYWORD_ONLY)
        compiled_fields = []
        text = ""
        for literal, field, _, _ in parts:
            text += literal
            if field is None:
                continue
            literals.append(text)
            text = ""
            param = signature.parameters[field]
            if param.kind is kinds.POSITIONAL_ONLY:
                return None
            position = positions[field] if param.kind is not kinds.KEYWORD_ONLY else None
            default = _MISSING if param.default is kinds.empty else param.default
            compiled_fields.append((field, position, default))
        literals.append(text)
        names = {
            p.name: (i if p.kind is not kinds.KEYWORD_ONLY else len(params))
            for i, p in enumerate(params)
            if p.kind is not kinds.POSITIONAL_ONLY
        }
        required = [(p.name, i) for i, p in enumerate(params) if p.default is kinds.empty]
        return cls(literals, compiled_fields, positional, names, required)

    def name(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str | None:
        """The name, or None when the arguments may not fit (the general path decides)."""
        given = len(args)
        if given > self.positional:
            return None
        names = self.names
        for keyword in kwargs:
            position = names.get(keyword)
            if position is None or position < given:  # unknown, or given twice
                return None
        for required, position in self.required:
            if position >= given and required not in kwargs:
                return None
        literals = self.literals
        out = [literals[0]]
        for index, (field, position, default) in enumerate(self.fields, 1):
            if position is not None and position < given:
                value = args[position]
            else:
                value = kwargs.get(field, default)
            out.append(encode_value(format(value, "")))
            out.append(literals[index])
        return "".join(out)
