"""The machine under the job: its packages matched to the notebook's, its GPUs checked, its VM ended."""
