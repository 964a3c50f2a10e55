import pytest

from lib.envs.polyguard.env import PolyGuardEnv


@pytest.fixture(scope="session")
def env():
    return PolyGuardEnv()
