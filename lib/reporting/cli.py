"""The verbs of `python -m lib` that work on a finished run folder: `sweep` (every GRPO checkpoint played again),
`package` and `verify` (an archive with checksums), `logs` (summaries of runs as a table). Registered by
lib/__main__.py; heavy imports happen only when a verb runs."""

from __future__ import annotations

from pathlib import Path


def _sweep(args) -> int:
    from ..evaluation.sweep import run_sweep
    from ..reporting.plots import draw
    from ..reporting.sweep import sweep_table

    run_sweep(args.run_dir, args.split, args.episodes)
    print(sweep_table(args.run_dir).to_markdown(index=False))
    print(draw(args.run_dir, "sweep").message)
    print(f"report.md shows it once the report runs again: python -m lib stage report --run-dir {args.run_dir}")
    return 0


def _package(args) -> int:
    from ..export.package import package_run

    record = package_run(args.run_dir, args.out, args.weights)
    left = f"; left out: {', '.join(record['left_out'])}" if record["left_out"] else ""
    print(f"wrote {record['archive']} ({record['files']} files + SHA256SUMS, sha256 {record['sha256'][:12]}){left}")
    if record["missing_gate_inputs"]:
        print(
            f"warning: the run folder lacks what the gate re-reads ({', '.join(record['missing_gate_inputs'])}): "
            "verify will find the files intact but the gate on the copy will fail"
        )
    return 0


def _verify(args) -> int:
    from ..export.package import format_verification, verify_archive

    result = verify_archive(args.archive, args.into)
    print(format_verification(result))
    return 0 if result["ok"] else 1 if not result["files"].ok else 3


def _logs(args) -> int:
    from ..reporting.logs import logs_table, markdown, write_csv

    table = logs_table(args.runs)
    print(markdown(table))
    if args.out:
        write_csv(table, args.out)
        print(f"wrote {args.out}")
    return 0


def add_run_tool_verbs(verbs) -> None:
    w = verbs.add_parser(
        "sweep",
        help="every saved GRPO checkpoint (and SFT as step 0) played on the same seeds: sweep/sweep.json + chart",
    )
    w.add_argument("--run-dir", type=Path, required=True)
    w.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    w.add_argument("--episodes", type=int, default=50, help="the first N of the evaluation's seeds of --split")
    w.set_defaults(func=_sweep)
    k = verbs.add_parser("package", help="one tar.gz of a run with SHA256SUMS inside (weights only with --weights)")
    k.add_argument("--run-dir", type=Path, required=True)
    k.add_argument("--out", type=Path, default=None, help="default: <run-dir>.tar.gz beside the run folder")
    k.add_argument("--weights", action="store_true", help="include model, adapter, merged and checkpoint weights")
    k.set_defaults(func=_package)
    v = verbs.add_parser(
        "verify", help="re-check every file of a package against its SHA256SUMS, then run the gate on the unpacked copy"
    )
    v.add_argument("archive", type=Path)
    v.add_argument("--into", type=Path, default=None, help="unpack here and keep it (default: a temporary folder)")
    v.set_defaults(func=_verify)
    o = verbs.add_parser("logs", help="per-stage and per-run summaries of runs as a Markdown table and a CSV")
    o.add_argument("runs", nargs="+", type=Path)
    o.add_argument("--out", type=Path, default=None, help="the CSV")
    o.set_defaults(func=_logs)
