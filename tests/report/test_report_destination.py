"""The report writes only its own directory: figures/ and tables/ replaced whole, foreign files refused, a
destination it cannot write a one-line error; two architectures are enough for a report."""

from __future__ import annotations

import errno

import pandas as pd
import pytest

from archpool.errors import DataError, StateError
from archpool.report import write_report


def _table(path, archs=("base", "qk")):
    rows = []
    for a in archs:
        for s in range(3):
            rows.append(
                dict(
                    run=f"{a}_s{s}",
                    arch=a,
                    seed=s,
                    swa=0,
                    qk_norm="layerwise" if a == "qk" else "none",
                    norm="pre",
                    n_kv_heads=4,
                    n_heads=4,
                    pretrain_ctx=128,
                    **{"mqar_acc@512": 0.5 + 0.1 * s + (0.05 if a == "qk" else 0)},
                )
            )
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_two_architectures_make_a_report(tmp_path):
    page = write_report(_table(tmp_path / "r.csv"), tmp_path / "report", "mqar_acc@512")
    assert page.is_file() and (tmp_path / "report" / "figures").is_dir()


def test_a_second_report_leaves_nothing_of_the_first(tmp_path):
    out = tmp_path / "report"
    write_report(_table(tmp_path / "r.csv"), out, "mqar_acc@512")
    (out / "tables" / "from_an_earlier_report.csv").write_text("x\n1\n")
    (out / "figures" / "old_figure.png").write_bytes(b"\x89PNG")
    write_report(_table(tmp_path / "r.csv"), out, "mqar_acc@512")
    assert not (out / "tables" / "from_an_earlier_report.csv").exists()
    assert not (out / "figures" / "old_figure.png").exists()
    assert list((out / "tables").glob("*.csv"))


def test_a_file_that_no_report_writes_is_not_replaced(tmp_path):
    out = tmp_path / "report"
    (out / "tables").mkdir(parents=True)
    (out / "tables" / "notes.txt").write_text("mine")
    with pytest.raises(StateError, match=r"holds 'notes.txt', which no report writes"):
        write_report(_table(tmp_path / "r.csv"), out, "mqar_acc@512")
    assert (out / "tables" / "notes.txt").read_text() == "mine"


def test_a_destination_that_cannot_be_written_is_one_named_error(tmp_path, monkeypatch):
    from archpool.report import html

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "report" / "analysis.json"))

    monkeypatch.setattr(html, "atomic_write_text", read_only)
    with pytest.raises(StateError, match=r"analysis.json: cannot write \(Read-only file system\)"):
        write_report(_table(tmp_path / "r.csv"), tmp_path / "report", "mqar_acc@512")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(DataError, match="exists and is not a directory"):
        write_report(_table(tmp_path / "r.csv"), tmp_path / "afile", "mqar_acc@512")
