"""VitaBench 2.0 harness: personalized, proactive agents over time-ordered user task sequences.

Paper: VitaBench 2.0 (arXiv 2605.27141); see `vitabench2/README.md` for the modules and the reproduction report.
"""
