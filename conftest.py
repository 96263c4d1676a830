"""Root test configuration: offline environment variables before any test imports transformers or trl."""

from agentrl_shared.offline import set_offline_env


set_offline_env()
