"""Test set-up for `vad`: offline environment variables before transformers/trl are imported."""

from agentrl_shared.offline import set_offline_env


set_offline_env()
