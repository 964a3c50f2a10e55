import pytest

from lib.envs.polyguard.env import PolyGuardEnv


@pytest.fixture(scope="session")
def env():
    return PolyGuardEnv()


ENVS = ("polyguard", "sentinel_trust", "sentinel_cluster", "json_tasks")


@pytest.fixture(scope="session")
def random_model(tmp_path_factory):
    """A tiny model of random weights whose tokenizer has seen every environment's prompts (for exact-scoring tests:
    each test compares scores under the weights it scores with)."""
    from lib.config import ModelConfig, TinyModelConfig
    from lib.envs import get_spec
    from lib.models import build_tiny, load_model

    texts = []
    for name in ENVS:
        spec = get_spec(name)
        env = spec.make_env()
        texts += [m["content"] for seed in range(3) for m in env.render(env.reset(seed, "train"))]
        texts.append(spec.vocabulary())
    folder = build_tiny(texts, TinyModelConfig(), tmp_path_factory.mktemp("tiny"), seed=0)
    model, tokenizer, _ = load_model(folder, ModelConfig(name="tiny"), trainable=False)
    return model.eval(), tokenizer
