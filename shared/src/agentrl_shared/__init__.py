"""Shared plumbing for the agentrl papers: offline models, text environments, multi-turn rollouts, evaluation.

Holds only what is the same for every paper; losses, advantages, skills and
evaluation protocols live in the paper packages.
"""

__version__ = "0.1.0"
