"""Per-job build environments: Python, the cell's torch, CUDA/ROCm toolkits, installers."""
