"""EnvACE: world rehearsal for tool-use agents."""
