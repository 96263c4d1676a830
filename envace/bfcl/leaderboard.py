"""bfcl-eval's own leaderboard aggregation over the score files under `$BFCL_PROJECT_ROOT/score`: the two calls that
end `bfcl evaluate` (`eval_runner.runner`: `update_leaderboard_table_with_local_score_file`, then
`generate_leaderboard_csv`), which write `score/data_overall.csv`, `data_multi_turn.csv`, ... for the score files
present. Runs INSIDE the isolated bfcl environment (`uv run --project envace/bfcl python envace/bfcl/leaderboard.py`);
envace's test compares its own V4 aggregation (`envace.bfcl.v4_summary`) with these files.
"""

from bfcl_eval.constants.eval_config import SCORE_PATH
from bfcl_eval.eval_checker.eval_runner_helper import (
    generate_leaderboard_csv,
    update_leaderboard_table_with_local_score_file,
)


if __name__ == "__main__":
    table = {}
    update_leaderboard_table_with_local_score_file(table, SCORE_PATH)
    generate_leaderboard_csv(table, SCORE_PATH)
