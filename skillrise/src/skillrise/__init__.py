"""SkillRise: cross-task skill evolution with solve/curate alternation."""
