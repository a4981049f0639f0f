"""The typed column key of results.csv: parse and format are inverses, and the parts are what the name says."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from archpool.columns import ColumnKey, keyed_columns

METRIC = st.from_regex(r"[a-z][a-z0-9]{0,6}(_[a-z0-9]{1,5}){0,3}", fullmatch=True)
FILTER = st.sampled_from(["", "d>128", "d<=64", "64<d<=128", "d>512"])
RUNG = st.sampled_from(["", "ext0", "ext150", "ladder_mean", "ladder_auc"])


@given(METRIC, st.integers(10, 10**6), FILTER, RUNG, st.booleans())
def test_parse_inverts_format(metric, length, filt, rung, base):
    key = ColumnKey(metric, length, filt, rung, base)
    assert ColumnKey.parse(key.format()) == key


def test_parts_of_a_ladder_column():
    key = ColumnKey.parse("mqar_acc@1024[d>128]#ext150")
    assert key == ColumnKey("mqar_acc", 1024, "d>128", "ext150", False)
    assert key.budget == 150 and ColumnKey.parse("mqar_acc@1024#ladder_mean").budget is None
    assert str(key.but(base=True, rung="")) == "base_mqar_acc@1024[d>128]"
    assert ColumnKey.parse("base_mqar_lp@128").base


def test_columns_that_are_not_scores_have_no_key():
    names = ["run", "pretrain_loss", "val_ppl_short", "mqar_acc@1024@0.5", "mqar_acc@8", "ruler_ll@512"]
    assert list(keyed_columns(names)) == ["ruler_ll@512"]
