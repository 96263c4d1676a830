"""The rows of the paper's tables as the trainer switches that define them (`vad train --method ROW`).

Kept apart from `config.py` (which imports TRL) so that the command line lists them without importing TRL.
"""

# Every row of the paper's tables as the trainer switches that define it (Tab. 1 main, Tab. 2 target ablation at 4B,
# Tab. 3 held-out, Tab. 4 divergence). `base` is the untrained model (evaluation only). `direct_fkl` (no paper row)
# is `direct` with the forward KL of the `vad_fkl` row: the CPU learning check's pair (README Deviation 11).
# `vision_opd` is `direct` with Vision-OPD's EMA teacher (VisionOPD/Vision-OPD @ c2e345f `scripts/run_vision_opd.sh`:
# `teacher_regularization=ema`, `teacher_update_rate=0.05`), the paper's Vision-OPD baseline (Tab. 3).
ROWS = {
    "base": None,
    "vad": {},
    "vad_noreg": {"reg_weight": 0.0},
    "direct": {"target": "direct", "reg_weight": 0.0},
    "direct_fkl": {"target": "direct", "reg_weight": 0.0, "divergence": "fkl"},
    "scalar": {"target": "scalar", "reg_weight": 0.0},
    "one_sided": {"target": "one_sided", "reg_weight": 0.0},
    "one_sided_reg": {"target": "one_sided"},
    "vad_fkl": {"divergence": "fkl"},
    "vad_rkl": {"divergence": "rkl"},
    "grpo": {"target": "grpo"},
    "vision_opd": {"target": "direct", "reg_weight": 0.0, "teacher_ema": 0.05},
}
