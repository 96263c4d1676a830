"""Offline environment for the SkillRise tests (also set by the root conftest)."""

from agentrl_shared.offline import set_offline_env


set_offline_env()
