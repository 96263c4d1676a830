"""VAD: visual-evidence attribution for multimodal on-policy distillation (arXiv 2607.28590) on TRL's GRPOTrainer.

Modules: `losses` (Eqs. 2-10), `data` (views, data, benchmarks), `config`, `trainer` (`VADTrainer`), `cli`, `bench`.
"""
