"""CSV cells that a spreadsheet shows as text, never runs as a formula.

A cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is a formula to Excel,
LibreOffice and Google Sheets (``=cmd|' /C calc'!A0``). Every CSV table archpool writes passes its
string cells (and header names) through :func:`csv_cell`, which prefixes such a cell with ``'``, the
spreadsheet convention for "text". Numbers are untouched: ``-0.5`` written as a number stays a number,
and so does a string that is a plain number (``"-5"``). :func:`restore_cell` undoes the prefix on read,
so ``archpool analyze`` reads back exactly the names it wrote (``restore_cell(csv_cell(s)) == s``).
"""

from __future__ import annotations

import re
from typing import Any

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
QUOTE = "'"
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")


def _needs_quote(text: str) -> bool:
    if not text:
        return False
    if text[0] in FORMULA_START:
        return not _NUMBER.match(text)
    # a cell that already starts with the quote gets one more, so that restore_cell is exact
    return text[0] == QUOTE and len(text) > 1 and (text[1] in FORMULA_START or text[1] == QUOTE)


def csv_cell(value: Any) -> Any:
    """``value`` ready for a CSV cell: a string a spreadsheet would evaluate is prefixed with ``'``;
    anything that is not a string (numbers included) is returned as it is."""
    if isinstance(value, str) and _needs_quote(value):
        return QUOTE + value
    return value


def restore_cell(value: Any) -> Any:
    """The string :func:`csv_cell` was given (its ``'`` prefix removed); other values as they are."""
    if isinstance(value, str) and len(value) > 1 and value[0] == QUOTE and (value[1] in FORMULA_START or value[1] == QUOTE):
        return value[1:]
    return value


def safe_frame(df: Any) -> Any:
    """A copy of the pandas DataFrame ``df`` with every string cell and column name passed through
    :func:`csv_cell` (numeric columns untouched), for ``DataFrame.to_csv``."""
    from pandas.api.types import is_numeric_dtype

    out = df.copy()
    for c in out.columns:
        if not is_numeric_dtype(out[c]):
            out[c] = out[c].map(csv_cell)
    out.columns = [csv_cell(str(c)) for c in out.columns]
    return out
