"""The OpenEnv manifest (`openenv.yaml`) of every environment package, written from the environment's spec.

Each package under `lib/envs/` ships one as package data, where OpenEnv's discovery reads it
(`importlib.resources`; docs/DEPLOY.md). Only the name and the description differ between environments, and both
come from `SPEC` (`EnvSpec.name`, `EnvSpec.description`): the files are this module's output, never edited by hand.
`python -m lib.serve.manifest` writes them again; tests/test_env_contract.py checks that each one is what this
module writes now.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from .. import envs
from ..envs import builtin_names, get_spec
from .app import build_app

PORT = 8000
APP = f"{build_app.__module__}:{build_app.__name__}"  # the generic app factory every manifest names
HEADER = """\
# OpenEnv manifest of the {name} environment (see docs/DEPLOY.md). Written by `python -m lib.serve.manifest`
# from the environment's SPEC (its name and description): edit the SPEC, not this file. Every environment under
# lib/envs/ is served by the same generic server: `app` is its factory, called with `args` as keyword arguments,
# and `command` starts it (from the repository root, or anywhere once the package is installed).
"""


def manifest_path(env_name: str) -> Path:
    """Where the manifest of a built-in environment package lives: lib/envs/<name>/openenv.yaml."""
    return Path(envs.__file__).parent / env_name / "openenv.yaml"


def manifest(env_name: str) -> str:
    """The text of `env_name`'s manifest: its name and its spec's description in the one shared layout."""
    spec = get_spec(env_name)
    if not spec.description or "\n" in spec.description:
        raise ValueError(f"environment {env_name!r}: the spec needs a one-line description for its manifest")
    fields = {
        "spec_version": 1,
        "name": env_name,
        "description": spec.description,
        "type": "space",
        "runtime": "fastapi",
        "app": APP,
        "args": {"env_name": env_name},
        "port": PORT,
        "command": f"python -m lib serve --env {env_name} --port {PORT} --host 0.0.0.0",
    }
    body = yaml.safe_dump(fields, sort_keys=False, width=10_000, allow_unicode=True)
    return HEADER.format(name=env_name) + body


def main() -> None:
    """Write every built-in environment's manifest; say which ones changed."""
    for name in builtin_names():
        path, text = manifest_path(name), manifest(name)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
