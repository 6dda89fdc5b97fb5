"""`buildtools smoke`: install each wheel as users do and prove it works on this runner."""
