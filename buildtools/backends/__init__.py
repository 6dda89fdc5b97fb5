"""Where a job's raw wheel is compiled: the local venv, or a container (docker/)."""
