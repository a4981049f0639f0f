"""``archpool analyze`` and ``archpool report``: statistics and an HTML report from a results table or pool."""

from __future__ import annotations

import argparse

from archpool.cli.args import positive_float, positive_int


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="SOURCE", help="a results table (CSV) or a pool directory (with results.csv)")
    p.add_argument(
        "--target",
        metavar="METRIC",
        help="the metric to explain (default: a pool directory's report.target, "
        "else a long-context column such as helmet / long_score, or the only metric)",
    )
    p.add_argument(
        "--short-ctx",
        type=positive_int,
        metavar="N",
        help="pretraining contexts ≤ N count as short (default: the "
        "table's short_ctx column, which pools write; else the smallest context when there are several, else 4096)",
    )
    p.add_argument(
        "--min-effect",
        type=min_effect,
        default=None,
        metavar="X",
        help="the smallest effect of interest (default: a pool directory's report.min_effect, else 0.01: one point of "
        "100 on an accuracy); an effect below it is never called a cost, and 'no effect larger than X' is a finding",
    )
    p.add_argument(
        "--no-answers",
        action="store_true",
        help="ignore the answers table (items.parquet) beside the results and test on seed means only",
    )
    p.add_argument(
        "--covariates",
        default="",
        metavar="COLS",
        help="comma-separated confound columns (e.g. init,fp8,n_layers): does the count effect survive them?",
    )


def min_effect(text: str) -> float:
    """``--min-effect``: the same bound as a pool file's ``report.min_effect``."""
    from archpool.study import min_effect_problem

    value = positive_float(text)
    problem = min_effect_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="the study's statistics from a results table or pool directory",
        description="R² and leave-one-out R² of the feature count, the four axes and every metric; "
        "coefficients with 95%% CIs; matched-pair effects, interactions and seed spread; confounds.",
    )
    _common(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=analyze_command)
    p = subparsers.add_parser(
        "report",
        help="a self-contained HTML report (+ PNG figures, CSV tables)",
        description="Write DIR/report.html (figures embedded), DIR/figures/*.png, DIR/tables/*.csv and DIR/analysis.json.",
    )
    _common(p)
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.set_defaults(func=report_command)
    p = subparsers.add_parser(
        "transfer",
        help="the transfer score: do the pool's single-feature effects follow the paper's per-feature profiles?",
        description="Per group of single-feature arms (architectures that differ in QK-norm, GQA, SWA, a short "
        "context or post-norm only), each feature's effect at four lengths standardised by the spread between "
        "the architectures, beside the paper's matched-pair HELMET effects at 8K/16K/32K/64K standardised the "
        "same way; their cosine (the transfer score) with a 95%% interval; docs/results/transfer/rule.md.",
    )
    p.add_argument("source", metavar="SOURCE", help="a results table (CSV) or a pool directory (with results.csv)")
    p.add_argument(
        "--measure",
        metavar="METRIC",
        help="the scored column at the longest length, e.g. 'mqar_rebind_acc@1024[d>512]#ext12' (a filter of half the "
        "length becomes the far half at every length; default: a pool directory's report.target)",
    )
    p.add_argument(
        "--lengths",
        type=_lengths,
        metavar="N,N,N,N",
        help="the four pool lengths that stand for the paper's 8K/16K/32K/64K (default: 1, 2, 4 and 8 times the "
        "long pretraining context)",
    )
    p.add_argument("--short-ctx", type=positive_int, metavar="N", help="pretraining contexts ≤ N count as short")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=transfer_command)


def _lengths(text: str) -> list[int]:
    parts = [positive_int(x) for x in text.split(",")]
    if len(parts) != 4:
        raise argparse.ArgumentTypeError(f"four lengths (for the paper's 8K/16K/32K/64K), got {len(parts)}")
    return parts


def _target(args) -> str | None:
    """``--target``, else the pool's own ``report.target`` when SOURCE is a pool directory."""
    if args.target is not None:
        return args.target
    from archpool.analysis.table import pool_report_settings

    return pool_report_settings(args.source).get("target")


def _min_effect(args) -> float:
    """``--min-effect``, else a pool directory's ``report.min_effect``, else the default (0.01)."""
    from archpool.analysis.table import pool_report_settings
    from archpool.study import MIN_EFFECT

    if args.min_effect is not None:
        return float(args.min_effect)
    value = pool_report_settings(args.source).get("min_effect")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else MIN_EFFECT


CLOSEST_SHOWN = 5


def check_target(df, target: str | None) -> None:
    """A ``--target`` that is no metric column of ``df``: a TableError naming the closest metric columns
    (difflib) and how many there are, instead of every column."""
    import difflib

    from archpool.analysis.table import TableError, metric_columns

    metrics = metric_columns(df)
    if target is None or target in metrics:
        return
    close = difflib.get_close_matches(target, metrics, n=CLOSEST_SHOWN, cutoff=0.5)
    kind = "a design column, not a metric" if target in df.columns else "not a metric column of the table"
    hint = f"closest: {', '.join(close)}" if close else "no close name"
    raise TableError(
        f"column {target!r} (--target): {kind}; {hint} ({len(metrics)} metric columns in all: the numeric columns of the results table)",
        column=target,
    )


def _covariates(args) -> list[str]:
    return [c.strip() for c in args.covariates.split(",") if c.strip()]


def analyze_command(args) -> int:
    from archpool.analysis import analyze, format_text, load_results, to_json
    from archpool.analysis.answers import load_answers
    from archpool.analysis.summary import design_summary
    from archpool.analysis.summary_text import format_design
    from archpool.analysis.table import metric_columns

    df = load_results(args.source)
    target = _target(args)
    check_target(df, target)
    if target is None and not metric_columns(df):
        r = design_summary(df, args.short_ctx)
        print(to_json(r) if args.json else format_design(r))
        return 0
    answers = None if args.no_answers else load_answers(args.source)
    r = analyze(df, target, args.short_ctx, _covariates(args), answers, _min_effect(args))
    print(to_json(r) if args.json else format_text(r))
    return 0


def report_command(args) -> int:
    from archpool.analysis.answers import load_answers
    from archpool.analysis.table import load_results, pool_report_settings
    from archpool.report import write_report

    check_target(load_results(args.source), _target(args))
    findings = pool_report_settings(args.source).get("findings") or ()
    page = write_report(
        args.source,
        args.out,
        _target(args),
        args.short_ctx,
        _covariates(args),
        findings_targets=list(findings),
        answers=None if args.no_answers else load_answers(args.source),
        min_effect=_min_effect(args),
    )
    print(f"wrote {page}")
    return 0


def transfer_command(args) -> int:
    from archpool.analysis import to_json
    from archpool.analysis.carry import carry_summary
    from archpool.analysis.summary_text import format_carry
    from archpool.analysis.table import TableError, default_short_ctx, load_results, pool_report_settings

    df = load_results(args.source)
    measure = args.measure if args.measure is not None else pool_report_settings(args.source).get("target")
    if measure is None:
        raise TableError("--measure: no scored column given and SOURCE is not a pool directory with a report.target")
    short = args.short_ctx if args.short_ctx is not None else default_short_ctx(df)
    c = carry_summary(df, measure, short, lengths=args.lengths)
    if c is None:
        raise TableError(
            f"{args.source}: no transfer score for {measure!r}: the table needs architectures that differ in one feature "
            "only and the measure's column at the lengths asked for",
            column=measure,
        )
    print(to_json(c) if args.json else "\n".join(format_carry(c)[1:]))
    return 0
