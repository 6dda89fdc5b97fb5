"""`buildtools build`: orchestration, incremental skipping, scheduling, progress, the run report."""
