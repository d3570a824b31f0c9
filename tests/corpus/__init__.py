"""A corpus of small drivers around code users really run, with ground truth measured without tpuscope."""
