"""The verbs of `python -m lib` that work on a run's artifacts: `package` and `verify` (an archive with checksums,
then the gate on its unpacked copy), `slim` (a run made fit to commit), `activate` (the artifact later loads use),
and the fresh-process workers of the export check and of post-save. Registered by lib/__main__.py; heavy imports
happen only when a verb runs."""

from __future__ import annotations

from pathlib import Path


def _package(args) -> int:
    from .package import package_run

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
    from .package import format_verification, verify_archive

    result = verify_archive(args.archive, args.into)
    print(format_verification(result))
    return 0 if result["ok"] else 1 if not result["files"].ok else 3


def _slim(args) -> int:
    from .slim import slim_run

    record = slim_run(args.run_dir)
    print(
        f"slimmed {args.run_dir}: removed {', '.join(record['removed']) or 'nothing'}; gzipped "
        f"{', '.join(record['gzipped']) or 'nothing'}; machine paths replaced in {len(record['paths_replaced_in'])} "
        f"files (slim.json). Check it: python -m lib gate {args.run_dir}"
    )
    return 0


def _activate(args) -> int:
    from .postsave import activate

    record = activate(args.run_dir, args.artifact)
    print(
        f"active model: {record['artifact']} {record['path']} (sha256 {record['sha256'][:12]}) "
        f"-> {Path(args.run_dir).parent / 'active_model.json'}"
    )
    return 0


def _model_outputs(args) -> int:
    from .merge import model_outputs_worker

    model_outputs_worker(args.run_dir, args.model_dir, args.prompts, args.out)
    return 0


def _postsave_worker(args) -> int:
    from .postsave import postsave_worker

    postsave_worker(args.run_dir, args.model_dir, args.episodes, args.out)
    return 0


def add_verbs(verbs) -> None:
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
    s = verbs.add_parser(
        "slim",
        help="make a finished run fit to commit: drop what the gate rebuilds, gzip large records, no machine paths",
    )
    s.add_argument("run_dir", type=Path)
    s.set_defaults(func=_slim)
    a = verbs.add_parser("activate", help="name the artifact of a run that later loads use (outputs/active_model.json)")
    a.add_argument("run_dir", type=Path)
    a.add_argument(
        "--artifact",
        choices=["grpo", "merged", "sft"],
        default=None,
        help="default: the first that exists of grpo, merged, sft",
    )
    a.set_defaults(func=_activate)
    m = verbs.add_parser("_model-outputs", help="internal: fresh-process side of the export check")
    m.add_argument("--run-dir", type=Path, required=True)
    m.add_argument("--model-dir", type=Path, required=True)
    m.add_argument("--prompts", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.set_defaults(func=_model_outputs)
    w = verbs.add_parser("_postsave-worker", help="internal: fresh-process side of postsave")
    w.add_argument("--run-dir", type=Path, required=True)
    w.add_argument("--model-dir", type=Path, required=True)
    w.add_argument("--episodes", type=int, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.set_defaults(func=_postsave_worker)
