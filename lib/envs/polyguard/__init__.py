"""PolyGuard, the medication-safety review environment (see DATA.md for the knowledge base)."""
from .env import PolyGuardEnv, render

__all__ = ["PolyGuardEnv", "render"]
