"""``key=value`` pairs: the command line's text form of a mapping (``--kernels rope=cpu``, ``--trim
layers=4,experts=64,top_k=4``), read by the validators of the run's fields that take one (titanflow.params:
ScenarioRun's ``kernels``, Trim), which accept the text as well as a mapping.
"""

from __future__ import annotations

import json


def key_value_pairs(text: str, field: str, form: str) -> dict:
    """``"a=1,b=2"``, the command line's form of a mapping, as ``{"a": "1", "b": "2"}`` (spaces around items,
    keys and values dropped); text that starts with ``{`` is read as a JSON object instead (its values as JSON
    gives them).

    Raises:
        ValueError: an item without ``=``, text that is not a JSON object, or a key given twice (which would
            silently keep the last), naming ``field`` and the expected ``form``.
    """
    if text.lstrip().startswith("{"):
        try:
            pairs = json.loads(text, object_pairs_hook=list)  # every key, duplicates included
        except json.JSONDecodeError as err:
            raise ValueError(f"{field}: {text!r} is not a JSON object ({err.msg}); fix: give {form} or a "
                             "JSON object") from None
        if twice := given_twice([key for key, _ in pairs]):
            raise ValueError(f"{field}: {', '.join(twice)} given more than once in {text!r}; fix: give each once")
        return dict(pairs)
    pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
    if any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"{field}: {text!r} is not {form}; fix: give {form}")
    keys = [key.strip() for key, _ in pairs]
    if twice := given_twice(keys):
        raise ValueError(f"{field}: {', '.join(twice)} given more than once in {text!r}; fix: give each once: {form}")
    return dict(zip(keys, (v.strip() for _, v in pairs)))


def given_twice(names: list[str]) -> list[str]:
    """The names that occur more than once in ``names``, sorted."""
    return sorted({name for name in names if names.count(name) > 1})
