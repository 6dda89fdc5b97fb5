"""matrix.yaml: loading with locations, validation, the model and its JSON Schema."""
