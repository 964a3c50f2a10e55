"""The environment boundary and the import graph: machinery that names no environment, no import cycles, a
registry with clear errors, and a toy environment defined outside lib/ that runs the whole pipeline."""

import re
import subprocess
import sys

import pytest

from lib import imports
from lib.config import ConfigError, load_config
from lib.envs import UnknownEnvironmentError, builtin_names, get_spec
from lib.envs.spec import EnvSpec
from tests import micro

TOY = "tests.toyenv"


def test_no_generic_module_imports_an_environment_package():
    edges = imports.graph()
    assert imports.environment_packages() == builtin_names() and "polyguard" in builtin_names()
    assert imports.env_violations(edges) == []
    planted = {**edges, "lib.training.corpus": edges["lib.training.corpus"] | {"lib.envs.polyguard.kb"}}
    assert imports.env_violations(planted) == ["lib.training.corpus -> lib.envs.polyguard.kb"]  # the check can fail


def test_generic_modules_never_name_an_environment():
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, builtin_names())) + r")\b", re.IGNORECASE)
    named = {}
    for path in sorted(imports.ROOT.rglob("*.py")):
        module = imports.module_name(path)
        if imports.owner(module) is None and (hits := pattern.findall(path.read_text())):
            named[module] = sorted(set(hits))
    assert named == {}


def test_the_import_graph_has_no_cycles_counting_imports_inside_functions():
    edges = imports.graph()
    assert imports.cycles(edges) == []
    looped = {**edges, "lib.io": {"lib.runs"}}  # runs imports io: planting the reverse edge closes a loop
    assert ["lib.io", "lib.runs", "lib.io"] in imports.cycles(looped)


def test_every_floor_imports_only_floors_below_it():
    """A floor is a folder or a loose module of lib/ (`imports.floor`): no two floors import each other, directly or
    through others, so every floor stands above all it imports."""
    assert imports.floor("lib.training.grpo") == "lib.training" and imports.floor("lib.io") == "lib.io"
    assert imports.floor("lib") == "lib" and imports.floor("lib.envs.polyguard.env") == "lib.envs"
    edges = imports.graph()
    assert imports.floor_cycles(edges) == []
    assert "lib.training" not in imports.floor_graph(edges)["lib.evaluation"]  # evaluation trains nothing
    # the check can fail: evaluation reaching back up into training closes a loop between the two floors
    planted = {**edges, "lib.evaluation.antihack": edges["lib.evaluation.antihack"] | {"lib.training.grpo"}}
    loops = imports.floor_cycles(planted)
    assert ["lib.evaluation", "lib.training", "lib.evaluation"] in loops
    ties = imports.floor_ties(planted, ["lib.evaluation", "lib.training", "lib.evaluation"])
    assert "lib.evaluation.antihack -> lib.training.grpo" in ties


def test_the_front_door_only_dispatches():
    """lib/__main__.py defines `main` alone and stays short: each floor registers its own verbs (`add_verbs`)."""
    import ast

    path = imports.ROOT / "__main__.py"
    tree = ast.parse(path.read_text())
    defined = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    assert defined == ["main"] and len(path.read_text().splitlines()) <= 80
    assert not [m for m, targets in imports.graph().items() if "lib.__main__" in targets]  # nothing imports it


def test_the_imports_command_lists_every_generic_module_and_passes():
    done = subprocess.run([sys.executable, "-m", "lib", "imports"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "lib.training.corpus: " in done.stdout and "import cycles: none" in done.stdout
    assert "floor cycles: none" in done.stdout
    assert "generic modules importing an environment package: none" in done.stdout
    assert "imports hidden behind strings: none" in done.stdout


def test_no_import_hides_behind_a_string_and_the_check_can_fail():
    """Every workbook import is a statement the graph sees; the environment registry's lookup of a user-given name
    (lib.envs.get_spec) is the one allowed dynamic import."""
    assert imports.hidden_imports() == []
    assert set(imports.ALLOWED_DYNAMIC_IMPORTS) == {("lib.envs", "get_spec")}
    planted = (
        "import importlib\n"
        "def load():\n"
        "    return importlib.import_module('lib.training.sft'), __import__('lib.io')\n"
        "STAGE = 'training.sft:run_sft'\n"
        "NOT_A_MODULE = 'grpo:steps'\n"
    )
    hits = imports.hidden_in_source(planted, "lib.pipeline.stages")
    assert [h.split(": ", 1)[0] for h in hits] == ["lib.pipeline.stages:3"] * 2 + ["lib.pipeline.stages:4"]
    registry = "import importlib\ndef get_spec(name):\n    return importlib.import_module(name)\n"
    assert imports.hidden_in_source(registry, "lib.envs") == []  # the allowed place ...
    assert len(imports.hidden_in_source(registry, "lib.evaluation.evaluate")) == 1  # ... and only there


def test_stages_are_function_references_the_import_graph_sees():
    from lib.pipeline.stages import STAGES

    edges = imports.graph()["lib.pipeline.stages"]
    for stage in STAGES:
        function = stage.function
        assert callable(function) and function.__module__ in edges, (stage.name, function.__module__)
    assert {s.function.__module__ for s in STAGES} == edges


def test_one_home_each_benchmarks_stages_and_orchestration():
    """Benchmark and probe code lives in lib/bench/ (bench/ holds only the evidence it wrote), with one GPU benchmark
    (bench_gpu, its modes and random model beside it); lib/pipeline/ holds orchestration only; the export and
    postsave stages live in lib/export/; evaluation trains nothing."""
    root = imports.ROOT
    assert not list((root.parent / "bench").glob("*.py"))
    assert sorted(p.stem for p in (root / "pipeline").glob("*.py")) == ["__init__", "cli", "fork", "runner", "stages"]
    assert not (root / "bench" / "gpu_check.py").exists()
    assert {"bench_gpu", "bench_train", "gpu_modes", "probe_explore", "probe_policy", "random_model"} <= {
        p.stem for p in (root / "bench").glob("*.py")
    }
    assert {"merge", "postsave"} <= {p.stem for p in (root / "export").glob("*.py")}
    edges = imports.graph()
    assert not [
        m
        for m, targets in edges.items()
        if m.startswith("lib.evaluation.") and any(t.startswith("lib.training") for t in targets)
    ]
    reaching = [m for m, targets in edges.items() if any(t.startswith("lib.bench") for t in targets)]
    assert all(m.startswith(("lib.bench", "lib.__main__")) for m in reaching), reaching  # no stage runs a benchmark


def test_the_package_holds_the_workbook_and_no_lab_machinery():
    """lib/ is what a user of `python -m lib` runs: no plan for one lent machine's transfer limits (the lease and
    its wheel carrier, removed), not even a word of it in any file the package ships."""
    root = imports.ROOT
    assert not list((root / "bench").glob("lease*"))
    word = re.compile(r"\blease", re.IGNORECASE)
    shipped = (".py", ".yaml", ".md", ".json", ".csv", ".html", ".txt")
    hits = [
        str(path.relative_to(root.parent))
        for path in sorted(root.rglob("*"))
        if path.suffix in shipped and "__pycache__" not in path.parts and word.search(path.read_text(errors="replace"))
    ]
    assert hits == []


def test_unknown_environment_is_a_clear_error_listing_the_known_ones():
    with pytest.raises(UnknownEnvironmentError, match=r"unknown environment 'nope'; known: \[.*'polyguard'"):
        get_spec("nope")
    with pytest.raises(UnknownEnvironmentError, match="cannot import"):
        get_spec("no_such_package.env")
    with pytest.raises(UnknownEnvironmentError, match="defines no SPEC"):
        get_spec("lib.stats")
    with pytest.raises(ConfigError, match="env: .*unknown environment 'nope'"):
        load_config("cpu-smoke", {"env": "nope"})
    with pytest.raises(ConfigError, match=r"grpo.reference_policy: \['ghost'\] are not policies of 'polyguard'"):
        load_config("cpu-smoke", {"grpo.reference_policy": "ghost"})
    # an improver's lookahead is finished by a policy the environment must have
    with pytest.raises(ConfigError, match=r"corpus.sft_policy: \['ghost'\] are not policies of 'polyguard'"):
        load_config("cpu-smoke", {"corpus.sft_policy": "improver:ghost"})
    chosen = load_config("cpu-smoke", {"corpus.sft_policy": "improver:evidence_expert"})
    assert chosen.corpus.sft_policy == "improver:evidence_expert"
    # the RL stage's labeller was measured and retired: naming it is an error with its evidence
    with pytest.raises(ConfigError, match=r"aggrevate.labeller: retired, .*-0.131 \[-0.210, -0.054\]"):
        load_config("cpu-smoke", {"aggrevate.labeller": "improver:evidence_expert"})


def test_a_spec_naming_a_policy_it_does_not_define_is_refused():
    spec = get_spec(TOY)
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    with pytest.raises(ValueError, match=r"gives roles to policies it does not define: \['ghost'\]"):
        EnvSpec(**{**fields, "roles": {**spec.roles, "ghost": "trivial"}})
    with pytest.raises(ValueError, match=r"needs exactly one 'teacher' policy, has \['stride_two', 'oracle'\]"):
        EnvSpec(**{**fields, "roles": {**spec.roles, "oracle": "teacher"}})
    with pytest.raises(ValueError, match=r"unknown roles \['expert'\]"):
        EnvSpec(**{**fields, "roles": {**spec.roles, "first_candidate": "expert"}})
    with pytest.raises(ValueError, match="unknown policy 'ghost' for environment 'toy'"):
        spec.make_policy("ghost")


# the shared tiny run (tests/micro.py) on the toy environment, with what differs from it
TOY_RUN = {
    **micro.MICRO,
    **micro.MICRO_EVAL,
    "env": TOY,
    "corpus.grpo_rollout_policies": None,  # the profile names PolyGuard's policies; unset: the toy's teacher, random
    "corpus.sft_episodes": 20,
    "corpus.grpo_prompts": 8,
    "sft.logging_steps": 1,
    "eval.episodes": 8,
    "eval.train_episodes": 4,
    "eval.ablation_episodes": 4,
}


@pytest.mark.slow
def test_a_toy_environment_outside_lib_runs_the_whole_pipeline(tmp_path):
    """corpus -> baselines -> SFT -> GRPO -> evaluate -> export -> post-save -> report + gate, on `env: tests.toyenv`:
    nothing in lib/ knows this environment, and every integrity check of the gate passes."""
    from lib.pipeline.stages import STAGE_NAMES, run_stage
    from lib.runs import Run

    config = load_config("cpu-smoke", TOY_RUN)
    run = Run(tmp_path / "toy-run", config)
    results = {stage: run_stage(stage, config, run) for stage in STAGE_NAMES}
    verdict = results["report"]["verdict"]
    failed = [c for c in verdict["checks"] if not c["passed"] and c["name"] not in ("improved", "beats_teacher")]
    assert verdict["integrity_passed"], failed
    report = (run.dir / "report.md").read_text()
    assert "held-out tests.toyenv episodes" in report and "teacher (stride_two)" in report
    anti = results["evaluate"]["metrics"]
    assert anti["all_attacks_passed"] and {"holdout/stride_two", "holdout/oracle", "holdout/repeat_last"} <= set(anti)
    assert anti["holdout/oracle"] == 1.0 and anti["holdout/stride_two"] == pytest.approx(1 / 3)


def _stage_violations(edges: dict[str, set[str]]) -> list[str]:
    """Imports (inside functions too) from a lib/training module of one stage to another stage's module, or from a
    shared module to any stage's."""
    from lib.training import STAGE_MODULES

    group = {f"lib.training.{m}": stage for stage, modules in STAGE_MODULES.items() for m in modules}
    return sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        if source in group
        for target in targets
        if target in group and group[target] != group[source] and group[target] != "shared"
    )


def test_no_training_stage_module_imports_another_stages_module_and_the_check_can_fail():
    from lib.training import STAGE_MODULES

    listed = [m for modules in STAGE_MODULES.values() for m in modules]
    on_disk = sorted(p.stem for p in (imports.ROOT / "training").glob("*.py") if p.stem != "__init__")
    assert sorted(listed) == on_disk and len(set(listed)) == len(listed)  # each module in exactly one group
    edges = imports.graph()
    assert _stage_violations(edges) == []
    assert "lib.training.labelling" in edges["lib.training.aggrevate"]  # the shared labelling, not the corpus's
    planted = {**edges, "lib.training.aggrevate": edges["lib.training.aggrevate"] | {"lib.training.sft"}}
    assert _stage_violations(planted) == ["lib.training.aggrevate -> lib.training.sft"]
    planted = {**edges, "lib.training.harness": edges["lib.training.harness"] | {"lib.training.alarms"}}
    assert _stage_violations(planted) == ["lib.training.harness -> lib.training.alarms"]


def _long_functions(root, limit: int = 80) -> list[str]:
    import ast

    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_lib_is_over_80_lines_and_the_check_can_fail(tmp_path):
    assert _long_functions(imports.ROOT) == []
    planted = tmp_path / "lib"
    planted.mkdir()
    (planted / "long.py").write_text("def f():\n" + "    x = 1\n" * 80 + "\n\ndef g():\n" + "    x = 1\n" * 79)
    assert _long_functions(planted) == ["lib/long.py:1 f (81 lines)"]
