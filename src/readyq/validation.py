"""Optional pydantic v2 validation of a handler's args and result.

``@queue.handler("resize", args_model=ResizeArgs, result_model=ResizeResult)``:

- on enqueue, the args are validated against ``args_model`` and stored as
  ``model_dump(mode="json")``; invalid args raise :class:`readyq.InvalidJobArgs` before
  anything is written;
- at run time the handler gets ``job.args`` as an ``args_model`` instance;
- the handler's return value (a model instance or anything ``result_model`` accepts) is
  validated and stored as JSON; a result that fails validation fails the attempt with
  :class:`readyq.InvalidJobResult`, under the handler's retry policy.

Any pydantic model a handler returns is stored as ``model_dump(mode="json")``, with or
without ``result_model``. pydantic is imported only when a handler names a model.
"""

from __future__ import annotations

import sys
from typing import Any

from readyq.errors import ConfigurationError, InvalidJobArgs, InvalidJobResult

MAX_LISTED_ERRORS = 5


def check_model(model: Any, what: str) -> Any:
    """Return ``model`` if it is None or a pydantic BaseModel subclass, else raise
    ConfigurationError (also when pydantic is not installed)."""
    if model is None:
        return None
    try:
        import pydantic
    except ImportError:
        raise ConfigurationError(
            f"{what} needs pydantic v2: pip install 'readyq[pydantic]'"
        ) from None
    if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
        raise ConfigurationError(f"{what} must be a pydantic BaseModel subclass, not {model!r}")
    return model


def _errors(exc: Any) -> list[dict[str, Any]]:
    # Without the input values: messages may reach logs, and args may be sensitive.
    return list(exc.errors(include_url=False, include_input=False, include_context=False))


def _summary(errors: list[dict[str, Any]]) -> str:
    parts = []
    for err in errors[:MAX_LISTED_ERRORS]:
        where = ".".join(str(x) for x in err.get("loc", ())) or "(value)"
        parts.append(f"{where}: {err.get('msg', 'invalid')}")
    if len(errors) > MAX_LISTED_ERRORS:
        parts.append(f"and {len(errors) - MAX_LISTED_ERRORS} more")
    return "; ".join(parts)


def _validate(model: Any, value: Any) -> Any:
    return value if isinstance(value, model) else model.model_validate(value)


def normalize_args(model: Any, type: str, args: Any) -> Any:
    """Validate enqueue-time ``args``; return the JSON-ready value to store.

    Raises:
        InvalidJobArgs: the args do not validate; ``errors`` lists why.
    """
    import pydantic
    import pydantic_core

    try:
        return _validate(model, args).model_dump(mode="json")
    except pydantic.ValidationError as exc:
        errors = _errors(exc)
        raise InvalidJobArgs(
            f"args of job type {type!r} do not match {model.__name__}: {_summary(errors)}",
            errors,
        ) from None
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidJobArgs(
            f"args of job type {type!r} cannot be dumped to JSON by {model.__name__}: {exc}"
        ) from None


def parse_args(model: Any, type: str, args: Any) -> Any:
    """The stored args as a ``model`` instance, for the handler.

    Raises InvalidJobArgs when the stored args no longer validate (they were enqueued
    before the model was registered, or under another version of it).
    """
    import pydantic

    try:
        return model.model_validate(args)
    except pydantic.ValidationError as exc:
        errors = _errors(exc)
        raise InvalidJobArgs(
            f"stored args of job {type!r} do not match {model.__name__}: {_summary(errors)}",
            errors,
        ) from None


def dump_result(model: Any, type: str, value: Any) -> Any:
    """The handler's return value as a JSON-ready value.

    Raises InvalidJobResult when it fails ``model`` (the attempt then fails).
    """
    if model is not None:
        import pydantic

        try:
            value = _validate(model, value)
        except pydantic.ValidationError as exc:
            raise InvalidJobResult(
                f"the result of job type {type!r} does not match {model.__name__}: "
                f"{_summary(_errors(exc))}"
            ) from None
    # pydantic cannot have made the value if it was never imported.
    pydantic_module = sys.modules.get("pydantic")
    if pydantic_module is not None and isinstance(value, pydantic_module.BaseModel):
        import pydantic_core

        try:
            return value.model_dump(mode="json")
        except pydantic_core.PydanticSerializationError as exc:
            raise InvalidJobResult(
                f"the result of job type {type!r} cannot be dumped to JSON: {exc}"
            ) from None
    return value
