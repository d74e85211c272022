"""Patches applied to the cell's libraries when it first imports them: progress from tqdm and joblib, and
the reuse of joblib tasks a preempted attempt already finished."""
