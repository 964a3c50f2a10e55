"""The serving verbs of `python -m lib`: `serve` and `replay record` (registered by lib/__main__.py; heavy imports
happen only when a verb runs). The load benchmark `bench-serve` lives with the other benchmarks (lib/bench)."""

from __future__ import annotations

import json
from pathlib import Path

from ..arguments import env_help


def _serve(args) -> int:
    import uvicorn

    from .app import MAX_BODY, build_app

    env_args = json.loads(args.env_args) if args.env_args else None
    app = build_app(args.env, args.run_dir, env_args=env_args, max_sessions=args.max_sessions)
    print(f"serving {args.env} on http://{args.host}:{args.port}  (dashboard: http://{args.host}:{args.port}/)")
    uvicorn.run(app, host=args.host, port=args.port, ws_max_size=MAX_BODY, log_level=args.log_level)
    return 0


def _replay(args) -> int:
    from .replay import record

    summary = record(args.run_dir)
    print(f"recorded {summary['actions']} actions of {summary['episodes']} episodes from {summary['source']}")
    print(f"-> {summary['path']}")
    return 0


def add_verbs(verbs) -> None:
    s = verbs.add_parser("serve", help="serve one environment over OpenEnv (HTTP + WebSocket) with its dashboard")
    s.add_argument("--env", required=True, help=env_help())
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--host", default="127.0.0.1", help="127.0.0.1 (default) keeps it on this machine")
    s.add_argument("--run-dir", type=Path, default=None, help="a run of this environment: its replay, charts, gate")
    s.add_argument(
        "--env-args", default=None, help='the environment\'s arguments as JSON, e.g. \'{"tasks": "t.jsonl"}\''
    )
    s.add_argument("--max-sessions", type=int, default=256, help="sessions open at once (WebSocket and HTTP each)")
    s.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    s.set_defaults(func=_serve)
    r = verbs.add_parser("replay", help="record a run's trained policy for the server to replay (no model loaded)")
    r.add_argument("action", choices=["record"])
    r.add_argument("--run-dir", type=Path, required=True)
    r.set_defaults(func=_replay)
