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

A call is bound to the decorated callable's own signature first, then to the one found
through ``__wrapped__`` (see :func:`signatures_of`), and named from the first that binds and
gives every field a value. A call that no signature names raises (it is never run without
its lock): :class:`.InvalidArgumentType`, a TypeError, when it fits none of them, as calling
the function would; :class:`.InvalidArgument` when it fits but leaves a field without value.
"""

from __future__ import annotations

import hashlib
import inspect
import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django_redis_locks.core.errors import InvalidArgument, InvalidArgumentType
from django_redis_locks.core.validation import MAX_NAME_BYTES, check_name

__all__ = ["MAX_VALUE_CHARS", "Namer", "bounded_name", "encode_value", "signatures_of"]

#: Longest encoded value kept as is in a name; longer ones become a digest.
MAX_VALUE_CHARS = 64
#: A name longer than MAX_NAME_BYTES keeps this many bytes, then "~" and a digest of all of it.
_DIGEST_CHARS = 40
_SAFE = "-._@+=,!"  # left as is by the encoding; everything else is %XX (also "~", which
# marks a digest: no encoded value can pass for the digest of another)
_PLAIN = re.compile(rf"[A-Za-z0-9{re.escape(_SAFE)}]{{0,{MAX_VALUE_CHARS}}}")


def encode_value(value: object) -> str:
    """One template value as it appears in a lock name: its text (``format(value, "")``),
    percent-encoded, bounded. ``None``, ``True``/``False`` and bytes are written apart
    (``~none``, ``~true``, ``~false``, ``~b`` and the percent-encoded bytes), so they never
    share a name with their text (the string ``"None"``); an int and its digits do share
    one (a URL gives ``"7"`` where a task gives ``7``)."""
    if value is None:
        return "~none"
    if isinstance(value, bool):
        return "~true" if value else "~false"
    if isinstance(value, bytes | bytearray | memoryview):
        return _encode_bytes(bytes(value))
    text = value if isinstance(value, str) else format(value, "")
    if _PLAIN.fullmatch(text):  # nothing to encode (ids, slugs): as quote() would leave it
        return text
    from urllib.parse import quote

    # quote() never escapes "~" itself; lone surrogates are encoded, not refused.
    encoded = quote(text, safe=_SAFE, errors="surrogatepass").replace("~", "%7E")
    if len(encoded) > MAX_VALUE_CHARS:
        return "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return encoded


def _encode_bytes(raw: bytes) -> str:
    from urllib.parse import quote

    encoded = "~b" + quote(raw, safe=_SAFE).replace("~", "%7E")
    if len(encoded) > MAX_VALUE_CHARS:  # ("~b" and 40 hex digits: never a text's "~" digest)
        return "~b" + hashlib.sha256(raw).hexdigest()[:40]
    return encoded


class _EncodingFormatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if not format_spec:
            return encode_value(value)
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


def signatures_of(func: Callable[..., Any]) -> tuple[inspect.Signature, ...]:
    """The signatures a decorated call may bind to, in the order they are tried.

    First the callable's own: what the call is really given to. A wrapper made with
    ``functools.wraps`` (``login_required``, an injecting decorator), a class view's
    ``as_view()`` (which copies ``dispatch``'s ``__wrapped__`` when ``dispatch`` carries a
    ``method_decorator``) or the partial ``method_decorator`` hands decorators all say,
    through ``__wrapped__``, that they take what the inner function takes: often not so.
    Then, if it differs, the signature found through ``__wrapped__``: a wrapper taking
    ``(*args, **kwargs)`` passes positional arguments on, and only the inner function names
    them.
    """
    own = inspect.signature(func, follow_wrapped=False)
    try:
        followed = inspect.signature(func)
    except (TypeError, ValueError):  # what __wrapped__ leads to has no signature to read
        return (own,)
    return (own,) if followed == own else (own, followed)


def _generic(signature: inspect.Signature) -> bool:
    """Only ``*args`` and ``**kwargs``: a signature that names no argument."""
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return all(p.kind in kinds for p in signature.parameters.values())


def _var_keyword(signature: inspect.Signature) -> str | None:
    return next(
        (p.name for p in signature.parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD),
        None,
    )


class Namer:
    """Turns a call's arguments into the lock name."""

    def __init__(
        self, key: str | Callable[..., str], signatures: Sequence[inspect.Signature], label: str
    ) -> None:
        self.key = key
        self.label = label
        #: (signature, name of its ``**kwargs`` or None), in the order calls are bound to them.
        self.signatures = [(signature, _var_keyword(signature)) for signature in signatures]
        #: The parameters the template's fields read (``request`` for ``{request.user.pk}``).
        self.roots: list[str] = []
        #: Whether naming may read ``request.user``: an async view then loads the user the
        #: async way first (a callable key may read anything).
        self.reads_user = not isinstance(key, str)
        self._compiled: _Compiled | None = None
        if isinstance(key, str):
            fields = self._check_template(key)
            # The fast path binds as the general path would: to the own signature, or, when
            # that names no argument, to the one through __wrapped__ (a keyword argument is
            # the same value in both).
            first = signatures[0]
            compiled_on = signatures[1] if len(signatures) > 1 and _generic(first) else first
            self._compiled = _Compiled.of(key, fields, compiled_on)

    def _shown(self) -> str:
        """The function and the signature its calls are given to, for messages."""
        signature = self.signatures[0][0].replace(return_annotation=inspect.Signature.empty)
        return f"{self.label}{signature}"

    def _check_template(self, template: str) -> list[str]:
        try:
            fields = [field for _, field, _, _ in _FORMATTER.parse(template) if field is not None]
        except ValueError as exc:
            raise InvalidArgument("key", f"is not a valid template: {exc}") from None
        self.reads_user = any(".user" in field for field in fields)
        for field in fields:
            root = field.split(".", 1)[0].split("[", 1)[0]
            if not root or root.isdigit():
                raise InvalidArgument("key", f"fields must name parameters, not {{{field}}}")
            if not any(
                root in signature.parameters or var_keyword is not None
                for signature, var_keyword in self.signatures
            ):
                raise InvalidArgument(
                    "key", f"field {{{field}}} names no parameter of {self._shown()}"
                )
            if root not in self.roots:
                self.roots.append(root)
        return fields

    def name(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
        if not isinstance(self.key, str):
            name: object = self.key(*args, **kwargs)
            return check_name(bounded_name(name) if isinstance(name, str) else name, "key")
        if self._compiled is not None:
            fast = self._compiled.name(args, kwargs)
            if fast is not None:
                return check_name(bounded_name(fast), "key")
        values = self._values(args, kwargs)
        try:
            name = _FORMATTER.vformat(self.key, (), values)
        except (KeyError, AttributeError, IndexError, TypeError, ValueError) as exc:
            # (ValueError: a format spec that does not fit the value, {n:05d} given "seven")
            raise InvalidArgument("key", f"template {self.key!r} failed: {exc!r}") from exc
        return check_name(bounded_name(name), "key")

    def _values(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The call's arguments by name, from the first signature that binds the call and
        gives every field a value; else the error that says why the call cannot be named."""
        unfit: TypeError | None = None
        missing: str | None = None
        for signature, var_keyword in self.signatures:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError as exc:
                unfit = unfit or exc
                continue
            bound.apply_defaults()
            values = dict(bound.arguments)
            if var_keyword is not None:
                values.update(values.pop(var_keyword, {}))
            absent = next((root for root in self.roots if root not in values), None)
            if absent is None:
                return values
            missing = missing or absent
        if missing is None:  # no signature binds: the function itself would refuse the call
            raise InvalidArgumentType(
                "key",
                f"the lock {self.key!r} of {self._shown()} cannot be named for this call, "
                f"which does not fit: {unfit}; {self.label} was not run",
            )
        raise InvalidArgument(
            "key",
            f"the lock {self.key!r} of {self._shown()} cannot be named for this call: it "
            f"gives no value for {{{missing}}} (given: {_given(args, kwargs)}); "
            f"{self.label} was not run. Pass {missing!r} by keyword, or give a callable key",
        )


def _given(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """What a call was given, for messages: how many positional arguments, which keywords
    (never their values: they may be secrets)."""
    parts = [f"{len(args)} positional argument{'s' if len(args) != 1 else ''}"]
    if kwargs:
        parts.append("keywords " + ", ".join(sorted(kwargs)))
    return " and ".join(parts)


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
            param = signature.parameters.get(field)
            if param is None:  # named by another of the callable's signatures only
                return None
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
            out.append(encode_value(value))
            out.append(literals[index])
        return "".join(out)
