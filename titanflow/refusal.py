"""The wording of a refusal: a pydantic error of the run's parameters as ``field: what is wrong, given <value>; fix:
<what to pass>``, the way every titanflow command prints bad input (the CLI, the flow, bisect, doctor)."""

from __future__ import annotations

from pydantic import ValidationError

from titanflow.params import TRIM_FORM

#: The fix for each kind of pydantic error (its ``type``), filled from the error's ``ctx``; the kinds a
#: ScenarioRun or Trim field can raise. Errors raised by the models' own checks (``value_error``) already
#: end with their fix.
FIXES = {
    "greater_than_equal": "pass {ge} or more",
    "greater_than": "pass more than {gt}",
    "less_than_equal": "pass {le} or less",
    "less_than": "pass less than {lt}",
    "int_parsing": "pass a whole number",
    "int_type": "pass a whole number",
    "int_from_float": "pass a whole number",
    "float_parsing": "pass a number",
    "float_type": "pass a number",
    "finite_number": "pass a finite number",
    "bool_parsing": "pass true or false",
    "bool_type": "pass true or false",
    "literal_error": "pass {expected}",
    "string_pattern_mismatch": "pass a value matching {pattern}",
    "string_too_long": "pass at most {max_length} characters",
    "string_type": "pass text",
    "dict_type": "pass op=impl[,op=impl] or a JSON object",
    "model_type": "pass layers=N,experts=E,top_k=K or a JSON object",
}


def _option(loc: tuple) -> str:
    """How a user names the field: ``--nproc`` for a top-level field; for a nested one the option and its key,
    ``--trim layers=`` (the form ``--trim layers=N,experts=E,top_k=K`` takes)."""
    parts = [str(part) for part in loc]
    option = f"--{parts[0].replace('_', '-')}"
    return option if len(parts) == 1 else f"{option} {'.'.join(parts[1:])}="


def _given(value) -> str:
    return value if isinstance(value, str) and value else repr(value)


def describe(err: ValidationError) -> str:
    """One line per pydantic error: ``field: what is wrong, given <value>; fix: <what to pass>`` (the fix from
    :data:`FIXES`), without pydantic's links and input dumps. A model's own check (``value_error``) names its
    field and fix itself and is kept as it is; a missing field reads ``field: missing; fix: pass --field``."""
    lines = []
    for error in err.errors():
        field = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        kind = error["type"]
        if kind == "value_error" or not field:  # whole-model checks already start with the field they are about
            lines.append(f"{field}: {message}" if field and not message.startswith(f"{field}:") else message)
        elif kind == "missing" and error["loc"][0] == "trim":  # a key of --trim's form: the whole form is the fix
            lines.append(f"{field}: missing; fix: pass --trim {TRIM_FORM}")
        elif kind == "missing":
            lines.append(f"{field}: missing; fix: pass {_option(error['loc'])}")
        elif kind == "extra_forbidden":
            lines.append(f"{field}: not a parameter; fix: drop {_option(error['loc'])}")
        else:
            ctx = {key: f"{value:g}" if isinstance(value, float) else value for key, value in error.get("ctx", {}).items()}
            fix = FIXES.get(kind, "pass a value its --help describes").format(**ctx)
            lines.append(f"{field}: {message}, given {_given(error['input'])}; fix: {fix} for {_option(error['loc'])}")
    return "\n".join(lines)
